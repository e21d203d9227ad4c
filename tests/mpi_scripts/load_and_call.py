"""Loads a built program directly (no Python-side rank check) and calls it."""
import sys

import numpy as np
from dace.sdfg.utils import load_precompiled_sdfg

compiled = load_precompiled_sdfg(sys.argv[1])
compiled(x=np.zeros(64, np.int64))
