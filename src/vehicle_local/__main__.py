# -*- test-case-name: tests.live.test_local -*-
"""
C{python -m vehicle_local [--port N] [--data-dir DIR] [-v]}: the local run
(what C{scripts/run} starts).
"""

from vehicle_local._run import main


if __name__ == "__main__":
    main()
