"""The open-loop load harness of bench/load.py, one layer per module:

* `deploy`: the system under test (`engram dev`, or every service its own process on the
  real backends), each process's pid, kill/restart by name;
* `corpus`: the synthetic population (tenants, agents, their spaces) and the pre-loaded corpus;
* `generator`: the open-loop generator, run in its own process (`python -m loadlib.generator`);
* `ledger`: every acknowledged write, and the check that each is readable at the end;
* `procstats`: CPU seconds and RSS of the deployment's processes (psutil);
* `runner`: fixed-rate runs, the knee search and the soak; `hooks`: what a fault plugs in;
* `report`: percentiles, the JSON and text outputs, the plots (matplotlib, Agg).
"""
