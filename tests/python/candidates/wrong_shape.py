"""An exec candidate whose o has its last two axes swapped (ht is right): an ERRORED row naming o."""
import numpy as np
import driftgate


@driftgate.candidate
def kda(p, x):
    HV = p["HV"] or p["H"]
    return {"o": np.zeros((p["B"], p["T"], p["V"], HV)), "ht": np.zeros((p["B"], HV, p["K"], p["V"]))}
