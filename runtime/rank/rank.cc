#include "runtime/rank/rank.h"

#include <utility>

namespace ckpt::runtime {

Result<std::unique_ptr<Rank>> Rank::Create(ContextConfig config) {
  auto rank = std::make_unique<Rank>();
  ASSIGN_OR_RETURN(rank->context, Context::Create(std::move(config)));
  rank->saves = RankSaves::Start(*rank->context);
  return rank;
}

}  // namespace ckpt::runtime
