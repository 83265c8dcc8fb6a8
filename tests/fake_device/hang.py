"""Fake device that never answers: a child sleeps too, so a timeout must kill the group."""

import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1], "w") as f:
    f.write(str(child.pid))
print("Running warm up loops...", flush=True)
time.sleep(600)
