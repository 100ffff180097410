"""``python -m costmodel``: the command line (same as the ``costmodel`` script)."""

import sys

from costmodel.cli.main import main

sys.exit(main())
