"""An exec candidate that returns o and forgets ht: an ERRORED row naming ht."""
import numpy as np
import driftgate


@driftgate.candidate
def kda(p, x):
    return {"o": np.zeros((p["B"], p["T"], p["HV"] or p["H"], p["V"]))}
