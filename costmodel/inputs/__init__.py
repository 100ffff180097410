"""What the user gives: records and their fields, and the hardware, model and runtime specs."""
