#include "collectives/control/solo_control_plane.h"

namespace ckpt::coll {
namespace {

class SoloControlPlane : public ControlPlane {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    return std::vector<std::string>{std::string(mine)};
  }
};

}  // namespace

std::unique_ptr<ControlPlane> MakeSoloControlPlane() { return std::make_unique<SoloControlPlane>(); }

}  // namespace ckpt::coll
