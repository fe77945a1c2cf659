"""Kernels made on first use: importing them imports no numba; the first call of one
makes them all, and kernels calling kernels run compiled."""

import pickle
import subprocess
import sys


def test_kernels_import_no_numba_until_one_is_called():
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from fgram.pipeline.kernels import keys, matching, counting\n"
        "from fgram.pipeline.tables import lookup, index\n"
        "before = 'numba' in sys.modules\n"
        "waiting = type(keys.chain_key1).__name__\n"
        "k = keys.chain_key1(5, 7)\n"  # a compiled call: numba's, and every kernel made
        "after = type(keys.chain_key1).__name__, type(matching.gather_rows).__name__\n"
        "print(before, waiting, k == keys.chain_key1(5, 7), *after)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "Kernel", "True", "CPUDispatcher", "CPUDispatcher"]


def test_a_waiting_kernel_pickles_by_name():
    code = (
        "import pickle, sys\n"
        "from fgram.pipeline.kernels import keys\n"
        "sys.stdout.buffer.write(pickle.dumps(keys.chain_key1))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert res.returncode == 0, res.stderr
    from fgram.pipeline.kernels import keys

    assert pickle.loads(res.stdout) is keys.chain_key1
