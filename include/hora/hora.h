// Umbrella header of hora's C++ API.
#pragma once

#include "hora/communicator.h"
#include "hora/elastic.h"
#include "hora/engine.h"
#include "hora/errors.h"
#include "hora/identity.h"
#include "hora/options.h"
#include "hora/types.h"
