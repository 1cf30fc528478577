"""Machine measurements run as a job's workers (task=benchmark, task=preflight): torch, in the ranks' processes.

gemm.py, attention.py, collectives.py time one thing each; runner.py is the job's "trainer" that runs a suite on
every rank, gathers the records on rank 0 and writes benchmark.json, the table and the plots (report.py).
"""
