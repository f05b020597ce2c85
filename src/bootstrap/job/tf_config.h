// A job that a cluster manager started with TensorFlow's TF_CONFIG (Kubeflow's TFJob, ...). Its
// ranks are a ForeignStart (foreign.h) whose store rank 0 serves at its own cluster entry.
#pragma once

#include <string>

#include "bootstrap/job/foreign.h"

namespace hora::bootstrap {

// TensorFlow's cluster description, {"cluster": {"chief": [...], "worker": ["host:port", ...]},
// "task": {"type": "worker", "index": i}}: ranks are the chief's, then the workers' in their
// order. InvalidArgumentError naming TF_CONFIG when it is malformed or the task is of a type that
// trains with no allreduce (ps, evaluator).
ForeignLaunch parseTfConfig(const std::string& tf_config);

}  // namespace hora::bootstrap
