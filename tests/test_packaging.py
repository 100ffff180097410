"""The YAML zoos load from an installed wheel, run from another directory."""

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_wheel_install_loads_zoos(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wheel_dir = tmp_path / "wheel"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheel_dir), repo],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(r.stderr[-2000:])
    (whl,) = list(wheel_dir.glob("costmodel-*.whl"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(whl)],
                   check=True)
    code = ("import costmodel, sys; assert costmodel.__file__.startswith(sys.argv[1]), costmodel.__file__; "
            "from costmodel.inputs.specs import zoo_ids; assert len(zoo_ids('hardware_specs')) >= 16; "
            "assert len(zoo_ids('model_specs')) >= 15; assert len(zoo_ids('runtimes')) >= 6; "
            "r = costmodel.evaluate({'model': 'llama-2-7b', 'hardware': 'h100-sxm', 'batch_size': 1, 'prompt_len': 64}); "
            "print(r['bound'])")
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code, str(target)], cwd=str(tmp_path), env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "memory"
