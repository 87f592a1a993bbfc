"""A build helper process for `kiln.tune` (docs/measure.md "Build helpers"): started by the tuner as
``python -c ...`` with one end of a socket as file descriptor 3; builds the runtime-compiled candidates it is sent
and hands their plans back, until the tuner closes the socket. Not for direct use."""
from __future__ import annotations

import sys


def main() -> int:
    from . import _kiln  # loads cuDNN as `import kiln` does

    try:
        _kiln.serve_build_helper(3)
    except Exception as e:  # the tuner reads the reason on the socket; this is for the log
        print(f"kiln build helper: {e}", file=sys.stderr)
        return 1
    return 0


def command() -> list[str]:
    """The command line that starts a helper from this interpreter and this copy of the package."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # The package's folder goes on the path only when it is not there already (installed, or PYTHONPATH): put first
    # otherwise, a site-packages folder could shadow the standard library with an old backport.
    code = (f"import sys; r = {root!r}; r in sys.path or sys.path.insert(0, r); "
            "from kiln import _build_helper; sys.exit(_build_helper.main())")
    return [sys.executable, "-c", code]
