"""Fake device whose benchmark crashes: partial stdout, an error on stderr, exit code 3."""

import sys

print("start unified benchmark run")
print("Running warm up loops...")
sys.stderr.write("Inference error \n")
sys.stderr.write("[ERROR] device disconnected: hdc channel closed\n")
sys.exit(3)
