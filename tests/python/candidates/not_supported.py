"""An exec candidate that supports no case: driftgate.NotSupported, exit 95, a NOT_SUPPORTED row."""
import driftgate


@driftgate.candidate
def kda(params, inputs):
    raise driftgate.NotSupported(f"layout={params['layout']} with T={params['T']}: no case is supported here")
