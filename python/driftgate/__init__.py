"""driftgate for Python: exec candidates and captured inputs (python/README.md).

    driftgate.candidate     decorator: a function (params, inputs) -> outputs as an exec program
    driftgate.run           the same for an undecorated function, returning the exit code
    driftgate.NotSupported  raise it for a case the candidate does not implement (exit 95)
    driftgate.read_inputs   the exec input file {in}: tensors, params, case, op, outputs asked
    driftgate.write_outputs the outputs to {out}, in the dtypes and shapes {in} asks
    driftgate.load, .save   any .safetensors file with driftgate's dtypes (bf16, fp8 via ml_dtypes)
    driftgate.convert       an array in a driftgate dtype, rounded once
    driftgate.capture       PyTorch hooks that save a module's forward inputs for
                            `driftgate verify --inputs FILE --case CASE` (imports torch when used)
"""
from driftgate.capture import capture
from driftgate.candidate import (EXIT_ERROR, EXIT_NOT_SUPPORTED, EXIT_OK, EXIT_USAGE, NotSupported,
                                 candidate, run)
from driftgate.dtypes import NUMPY as DTYPES
from driftgate.dtypes import convert
from driftgate.exec_io import ExecInput, OutputError, read_inputs, write_outputs
from driftgate.files import load, save

__all__ = ["candidate", "run", "NotSupported", "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_NOT_SUPPORTED",
           "read_inputs", "write_outputs", "ExecInput", "OutputError", "load", "save", "convert", "DTYPES",
           "capture"]
__version__ = "0.1.0"

