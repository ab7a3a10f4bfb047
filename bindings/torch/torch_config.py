"""Prints what meson needs to build braid_torch against the PyTorch of this interpreter.

One value per line, in this order: torch version, major version, include directories (';'), library
directory, _GLIBCXX_USE_CXX11_ABI (0/1), pybind11's compiler type, stdlib and build ABI as torch
was built with them (an extension must use the same, or pybind11 does not see torch's types), and
the CUDA version torch was built for (empty for a CPU-only torch).
Exits 1 with the reason on stderr when torch cannot be imported.
"""
import os
import sys

try:
    import torch
    import torch.distributed
    from torch.utils import cpp_extension
except Exception as exc:  # any import failure means: no usable torch here
    sys.stderr.write(f"cannot import torch with {sys.executable}: {exc}\n")
    sys.exit(1)

if not torch.distributed.is_available():
    sys.stderr.write(f"torch {torch.__version__} was built without torch.distributed\n")
    sys.exit(1)

C = torch._C
print(torch.__version__.split("+")[0])
print(torch.__version__.split(".")[0])
print(";".join(d for d in cpp_extension.include_paths() if os.path.isdir(d)))
print(cpp_extension.library_paths()[0])
print(1 if C._GLIBCXX_USE_CXX11_ABI else 0)
print(getattr(C, "_PYBIND11_COMPILER_TYPE", "") or "")
print(getattr(C, "_PYBIND11_STDLIB", "") or "")
print(getattr(C, "_PYBIND11_BUILD_ABI", "") or "")
print(torch.version.cuda or "")
