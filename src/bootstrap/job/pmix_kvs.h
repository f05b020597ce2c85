// PMIx, the key-value service of OpenMPI's runtime (and of Slurm's, PRRTE's), reached through the
// libpmix that OpenMPI itself uses, loaded with dlopen when a job needs it: hora neither links
// it nor needs it installed elsewhere. Built only where PMIx's headers were found at configure
// time (libpmix-dev); elsewhere openPmixKvs says so.
#pragma once

#include <memory>

#include "bootstrap/job/launcher_kvs.h"

namespace hora::bootstrap {

// PMIx_Init as a client of the server named by the PMIX_* variables of this process. Throws
// InvalidArgumentError when libpmix cannot be loaded, PeerError when the server refuses.
std::unique_ptr<LauncherKvs> openPmixKvs(const common::Deadline& deadline);

}  // namespace hora::bootstrap
