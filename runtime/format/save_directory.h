// Where a save writes before its commit: "<path>.tmp-<save id>", a directory that rank 0 claims
// (io/claimed_directory.h) before any rank writes into it and holds until the save is committed or abandoned. A
// temporary directory nobody claims was left by a save whose rank 0 died; the next save to the same path, and the
// manager, remove such leftovers and leave live ones alone.
//
// On object storage ("s3://..." paths) nothing can be renamed: a save writes its data objects where they stay, under
// "<path>/data/<save id>/", and commits by creating "<path>/MANIFEST" last, only if absent. Objects of a save that
// never committed are removed by the save itself when it fails, else by the next save to the same path (or the
// manager) once they are older than StaleObjectAge(): there is no claim to tell a dead save from a slow one.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"
#include "io/claim.h"

namespace ckpt::runtime {

inline constexpr std::string_view kTemporaryInfix = ".tmp-";

// A save's identity: 16 hex digits, fresh for every save (and every persist of a memory checkpoint).
std::string NewSaveId();

// Where a save to `path` writes its files; the path itself on object storage.
std::string TemporaryDirectory(const std::string& path, const std::string& save_id);
// The folder of the save's data files inside its temporary directory, as the manifest names them: "data", or
// "data/<save id>" on object storage.
std::string DataDirectoryOf(const std::string& path, const std::string& save_id);
// What a save that failed removes: its temporary directory, or its data objects on object storage.
std::string UncommittedSaveFiles(const std::string& path, const std::string& save_id);

// How old the objects of an uncommitted save on object storage must be before another save or the manager removes
// them as a dead save's: CKPT_S3_STALE_AGE_S, by default an hour, far longer than a save's default timeout, so that a
// slow save is never taken for dead.
inline constexpr char kStaleAgeVar[] = "CKPT_S3_STALE_AGE_S";
std::chrono::seconds StaleObjectAge();

// Rank 0, before a save's first collective step: refuses a `path` that already exists (kAlreadyExists), removes
// the unclaimed temporaries of earlier saves to `path`, then creates and claims this save's temporary directory.
// The claim is invalid where the file system cannot lock directories, and on object storage, where the stale objects
// under <path>/data/ are removed instead.
Result<io::Claim> ClaimSaveDirectory(const std::string& path, const std::string& save_id);

}  // namespace ckpt::runtime
