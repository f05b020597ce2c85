"""horovod.run with Horovod's signature, carried out by hora.run.

Horovod's parameters that choose its controller (use_gloo, use_mpi) or tune its launcher's own
caches (disable_cache) change nothing on hora, which has one transport and no launcher cache.
The elastic ones (min/max_num_proc or min/max_np, slots, reset_limit, cooldown_range,
host_discovery_script) make an elastic job, as in Horovod; it returns what the workers of its
last generation returned, in rank order. The MPI and network ones are refused with a ValueError
naming them, rather than silently ignored.
"""

import warnings

import hora

_UNSUPPORTED = ("mpi_args", "network_interface", "network_interfaces")


def run(func, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None):
    """Runs func(*args, **kwargs) on num_proc workers and returns their results in rank order."""
    given = {k: v for k, v in locals().items() if k in _UNSUPPORTED and v is not None}
    if given:
        raise ValueError(f"horovod.run on hora does not support {', '.join(sorted(given))} yet")
    num_proc = _one_of("num_proc", num_proc, "np", np)
    min_num_proc = _one_of("min_num_proc", min_num_proc, "min_np", min_np)
    max_num_proc = _one_of("max_num_proc", max_num_proc, "max_np", max_np)
    if use_mpi:
        warnings.warn("horovod.run on hora: use_mpi has no effect (hora has its own transport)")
    if hosts is not None and hostfile is not None:
        raise ValueError("horovod.run: give hosts or hostfile, not both")
    return hora.run(func, args=args, kwargs=kwargs, np=num_proc or min_num_proc or 1, hosts=hosts, hostfile=hostfile,
                    start_timeout=start_timeout, ssh_port=ssh_port, ssh_identity_file=ssh_identity_file,
                    executable=executable, verbose=bool(verbose), output_filename=output_filename,
                    min_np=min_num_proc, max_np=max_num_proc, slots=slots, host_discovery_script=host_discovery_script,
                    reset_limit=reset_limit, cooldown_range=cooldown_range)


def _one_of(name, value, alias, alias_value):
    """Horovod's two names of one parameter (num_proc and np, ...): either, or both if equal."""
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(f"horovod.run: {name}={value} and {alias}={alias_value} disagree")
    return value if value is not None else alias_value
