// How many threads each worker's math libraries may start, when the user did not say.
//
// Note [thread budget]: OpenMP, OpenBLAS and MKL start a thread per core in every process unless
// told otherwise. N workers on a host of C cores then run N x C math threads, which spin while
// they wait for each other, and a step's time depends on how the scheduler interleaves them (the
// torch CNN's compute bound at 2 ranks on 2 cores: repeats spread over 1198-2283 images/s so,
// 2221-2495 with one thread each). torch.set_num_threads does not help where torch's BLAS is
// OpenBLAS (Debian's): OpenBLAS sizes its pool from OMP_NUM_THREADS or OPENBLAS_NUM_THREADS. So,
// as torchrun does (it sets 1), horarun gives a worker OMP_NUM_THREADS = max(1, C / N), C the
// cores this host lets it use and N the job's workers on the host, unless the worker's
// environment has OMP_NUM_THREADS already (the user's shell, or -x) or it is alone on its host.
// With --verbose it says so. TensorFlow reads no OMP_NUM_THREADS: hora.tensorflow's init gives
// its intra- and inter-op pools the value, or without it (mpirun, srun) the cores divided among
// the host's ranks (python/hora/tensorflow/mpi_ops.py). Ranks that mpirun or srun started have
// no budget when OpenBLAS loads: every frontend's init then lowers each loaded OpenBLAS's pool
// (Debian's, and the renamed copy numpy's wheels carry) to
// that share, unless the user set OMP_NUM_THREADS or OPENBLAS_NUM_THREADS
// (python/hora/common/thread_budget.py).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hora::launcher {

// The OMP_NUM_THREADS to give a worker whose variables are `env` (HORA_LOCAL_SIZE among them) on
// a host of `cores` usable cores, started together with `together` - 1 other ranks there (which
// may be more than its local size says: two -H names of one machine), or nothing (see the Note).
// `inherited`: whether the environment the worker inherits beneath `env` sets OMP_NUM_THREADS.
std::optional<std::string> threadBudget(const std::map<std::string, std::string>& env, bool inherited, int cores,
                                        int together);

// The cores this process may run on (its affinity mask, which taskset and cgroups' cpusets
// narrow), at least 1.
int usableCores();

// Adds threadBudget's OMP_NUM_THREADS to each of `envs` (the workers this process starts on its
// host, beneath its own environment), saying so on stderr if `say`; returns how many it set it for.
int addThreadBudget(std::vector<std::map<std::string, std::string>*> envs, bool say);

}  // namespace hora::launcher
