"""A stand-in SGLang server that speaks SGLang's native HTTP contract, with a throughput model and faults.

The tests, the demo and the benchmarks run the pipeline against it instead of a GPU deployment:
`start_sim_server(config)` on an event loop, `SimServerThread(config)` from synchronous code, or
`eagle-datagen serve-sim` as a process.
"""

from eagle_datagen.standin.sglang.config import FAULT_KINDS, PROFILES, FaultRates, SimConfig
from eagle_datagen.standin.sglang.runner import SimServer, SimServerThread, start_sim_server

__all__ = ["FAULT_KINDS", "PROFILES", "FaultRates", "SimConfig", "SimServer", "SimServerThread", "start_sim_server"]
