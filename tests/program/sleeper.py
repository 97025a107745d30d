"""A program that starts one process of its own and then waits to be stopped (a test helper).

    python sleeper.py MARKS [--torch]

Writes MARKS/run-PID (and MARKS/grandchild-PID for the process it starts) once running, then sleeps; on Ctrl-C it
writes MARKS/interrupted-PID and exits 130, as a program interrupted by hand would. ``--torch``: imports torch
first (what a training script does; under ascendify it is imported anyway).
"""

import os
import subprocess
import sys
import time

marks = sys.argv[1]
os.makedirs(marks, exist_ok=True)
if "--torch" in sys.argv:
    import torch  # noqa: F401
child = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                          f"open(os.path.join({marks!r}, f'grandchild-{{os.getpid()}}'), 'w').close()\n"
                          "time.sleep(600)"])
end = time.monotonic() + 120
while not any(n == f"grandchild-{child.pid}" for n in os.listdir(marks)) and time.monotonic() < end:
    time.sleep(0.01)
with open(os.path.join(marks, f"run-{os.getpid()}"), "w") as f:
    f.write(os.environ.get("RANK", ""))
try:
    time.sleep(600)
except KeyboardInterrupt:
    open(os.path.join(marks, f"interrupted-{os.getpid()}"), "w").close()
    child.kill()
    raise SystemExit(130) from None
