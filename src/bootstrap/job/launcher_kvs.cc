#include "bootstrap/job/launcher_kvs.h"

#include "bootstrap/job/pmi_wire_kvs.h"
#include "bootstrap/job/pmix_kvs.h"
#include "hora/errors.h"

namespace hora::bootstrap {

std::unique_ptr<LauncherKvs> openLauncherKvs(const std::string& spec, int /*rank*/, const common::Deadline& deadline) {
  if (spec.rfind("pmi-fd:", 0) == 0) return std::make_unique<PmiWireKvs>(std::stoi(spec.substr(7)), deadline);
  if (spec == "pmix") return openPmixKvs(deadline);
  throw InternalError("unknown launcher key-value service '" + spec + "'");
}

}  // namespace hora::bootstrap
