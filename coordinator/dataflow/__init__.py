"""Job graphs and job definitions (no Spark here).

- ``graph``: a job graph expanded into the execution graph, back-edges found by DFS;
- ``iterate``: the loop construct of the job API (head, body, tail, back-edge);
- ``jobs``: job definitions, what the checkpoint lifecycle knows of a job (graph, state, sinks, policies).
"""
