"""An exec candidate that raises: an ERRORED row with the traceback's last lines."""
import driftgate


@driftgate.candidate
def kda(p, x):
    return {"o": 1 / 0}
