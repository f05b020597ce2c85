"""horovod.run with Horovod's signature, carried out by hora.run.

Horovod's parameters that choose its controller (use_gloo, use_mpi) or tune its launcher's own
caches (disable_cache) change nothing on hora, which has one transport and no launcher cache;
the elastic ones (min/max_num_proc, slots, reset_limit, cooldown_range,
host_discovery_script) and the MPI/network ones are refused with a ValueError naming them,
rather than silently ignored.
"""

import warnings

import hora

_UNSUPPORTED = ("min_num_proc", "max_num_proc", "slots", "reset_limit", "cooldown_range",
                "host_discovery_script", "output_filename", "mpi_args", "network_interface",
                "network_interfaces", "min_np", "max_np")


def run(func, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None):
    """Runs func(*args, **kwargs) on num_proc workers and returns their results in rank order."""
    given = {k: v for k, v in locals().items() if k in _UNSUPPORTED and v is not None}
    if given:
        raise ValueError(f"horovod.run on hora does not support {', '.join(sorted(given))} yet")
    if num_proc is not None and np is not None and num_proc != np:
        raise ValueError(f"horovod.run: num_proc={num_proc} and np={np} disagree")
    if use_mpi:
        warnings.warn("horovod.run on hora: use_mpi has no effect (hora has its own transport)")
    if hosts is not None and hostfile is not None:
        raise ValueError("horovod.run: give hosts or hostfile, not both")
    return hora.run(func, args=args, kwargs=kwargs, np=num_proc or np or 1, hosts=hosts, hostfile=hostfile,
                    start_timeout=start_timeout, ssh_port=ssh_port, ssh_identity_file=ssh_identity_file,
                    executable=executable, verbose=bool(verbose))
