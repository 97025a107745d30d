import json
import sys

import torch

import ascendify.auto  # noqa: F401  (first line of the entry script: CUDA calls are redirected from here on)

x = torch.randn(4, 4, device="cuda")
print(json.dumps({"device": str(x.device), "available": torch.cuda.is_available(), "argv": sys.argv[1:],
                  "name": __name__}))
