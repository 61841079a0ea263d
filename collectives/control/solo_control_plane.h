// The control plane of a one-rank job: every collective completes at once, with no socket and no port.
#pragma once

#include <memory>

#include "collectives/control/control_plane.h"

namespace ckpt::coll {

std::unique_ptr<ControlPlane> MakeSoloControlPlane();

}  // namespace ckpt::coll
