// Collective steps whose outcome every rank must share: each rank contributes its local status with a payload, and
// either every rank gets what the step yields (every payload, rank 0's decision from them, or the payloads meant for
// it in an all-to-all) or every rank gets the same error. Each step is named ("save (proposals)", "load (requests)"):
// ranks that reach different steps, because one called save while another called load, all get kMismatch naming what
// each rank called, instead of misreading each other's payloads.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/control/control_plane.h"
#include "common/status.h"

namespace ckpt::runtime {

// All ranks' payloads by rank (gathered at rank 0 and broadcast from there: see DecideAtRoot), or, if any rank failed
// (or the exchange itself did), one error identical on every rank: the code of the lowest failing rank and a message
// naming the failing ranks with what each reported, ranks that report the same message grouped ("ranks 0, 1: ...; rank
// 3: ..."; a few messages, then a count). When every rank reports the same error (one agreed earlier), it is returned
// as it is. A failed exchange (dead peer, timeout) is returned as the control plane reported it.
Result<std::vector<std::string>> AgreeAndGather(coll::ControlPlane& control, std::string_view step, const Status& local,
                                                std::string_view payload);

// A rank whose local status is kTimeout has already waited out the timeout on some peer: it waits only a few
// seconds more for the others, so that a stopped peer fails the step once, not once per wait, and, where the
// others do not come, returns its own timeout.

// Rank 0 decides for every rank: each rank's status and payload travel to rank 0 only; where every rank is fine,
// `decide` (run on rank 0 alone, with the payloads by rank) gives the verdict, which every rank returns: its payload
// or its error. Failures are described as AgreeAndGather describes them. Two collectives (a gather to rank 0, a
// broadcast), so rank 0 moves O(world) bytes and every other rank only its own payload and the verdict.
using Decision = std::function<Result<std::string>(std::vector<std::string> payloads)>;
Result<std::string> DecideAtRoot(coll::ControlPlane& control, std::string_view step, const Status& local,
                                 std::string_view payload, const Decision& decide);

// Every rank's status, agreed through rank 0 (DecideAtRoot): Ok on every rank, or the same error on every rank.
Status Agree(coll::ControlPlane& control, std::string_view step, const Status& local);

// An all-to-all exchange that carries an agreement with it, in one collective where an Agree before the exchange
// takes three (gather, broadcast, exchange): each rank sends every rank its status with the payload meant for that
// rank, and every rank judges the statuses it received as AgreeAndGather does.
// WithStatus: what this rank sends, by rank (`outgoing` has world_size payloads, or none where `local` failed).
std::vector<std::string> WithStatus(std::string_view step, const Status& local, std::vector<std::string> outgoing,
                                    int world_size);
// What each rank sent this one, by rank, or the error every rank judges alike. A malformed contribution fails only
// the rank that received it, so an agreement must follow before anything is written.
Result<std::vector<std::string>> JudgeExchange(const std::vector<std::string>& received);

}  // namespace ckpt::runtime
