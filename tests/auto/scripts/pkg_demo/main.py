"""Run with -m: prints how it was run, then exits with the code given as the first argument."""

import json
import sys

import torch

d = torch.device("cuda")
print(json.dumps({"name": __name__, "argv0": sys.argv[0], "args": sys.argv[1:], "device": str(d),
                  "module_file": __file__}))
if __name__ == "__main__":
    raise SystemExit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
