import importlib.util
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture
def data_dir():
    return DATA


@pytest.fixture(scope="module")
def slc():
    """validation/serve_load_curves.py as a module (the load-curve script's settings and row rules)."""
    path = os.path.join(os.path.dirname(__file__), "..", "validation", "serve_load_curves.py")
    spec = importlib.util.spec_from_file_location("serve_load_curves", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def measurements():
    """The project's validation rows (validation/measurements.csv), parsed."""
    from costmodel.calibration.validate import load_measurements
    return load_measurements()


@pytest.fixture(scope="session")
def loso(measurements):
    """Held-out run by source table (leave-one-table-out refits, a few seconds)."""
    from costmodel.calibration import calibrate
    return calibrate.leave_one_source_out(measurements, by="group")


@pytest.fixture(scope="session")
def lopo(measurements):
    """Held-out run by publication (leave-one-publication-out, the headline: what `costmodel validate
    --report` writes to error_band.yaml and the README quotes)."""
    from costmodel.calibration import calibrate
    return calibrate.leave_one_source_out(measurements)
