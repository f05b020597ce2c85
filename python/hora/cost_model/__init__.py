"""An alpha-beta-gamma cost model of hora's gradient exchanges (docs/parameter_servers.md, "Cost
model"): ring, recursive doubling and hierarchical allreduce, and parameter servers (ps-sync,
ps-async), with parameters fitted to measurements of the machine at hand; it predicts a step's
communication time for a described cluster and says which mode and how many servers to use.

  params.py     the terms and a predicted time as a dot product
  cluster.py    the described cluster
  exchanges.py  allreduce algorithms' cost vectors       servers.py   parameter servers'
  fit.py        least squares from measurement records   predict.py   a step, 2..1,024 ranks
  models.py     gradient sizes of real models            cli.py       python -m hora.cost_model

The modules are imported by name (hora.cost_model.fit, ...): this package imports nothing itself.
"""
