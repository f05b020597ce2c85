"""horovod.common: the parts Horovod scripts import directly. Its exceptions and util are
modules of this package; elastic (State, ObjectState, run_fn), process_sets (ProcessSet, ...) and
basics are hora.common's own modules, registered under Horovod's names (the module objects, not
copies), so that `from horovod.common.elastic import ObjectState` is hora's class."""

import importlib
import sys

for _name in ("basics", "elastic", "process_sets"):
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"hora.common.{_name}")
    globals()[_name] = sys.modules[f"{__name__}.{_name}"]
del _name
