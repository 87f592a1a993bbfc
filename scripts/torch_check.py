#!/usr/bin/env python3
"""Cross-check Kiln's outputs against PyTorch: the command line of the torch_check package beside this file
(scripts/torch_check/, `python -m torch_check` from scripts/). See its __main__.py or --help.

    python scripts/torch_check.py --kiln build-gpu/kiln --out OUT_DIR examples/*.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check.__main__ import main  # noqa: E402  (the package folder wins over this file's name)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
