// File jobs whose file is an S3 object ("s3://bucket/prefix/.../data/<id>/<rank>-<f>.bin"): a data file's write
// jobs stream its bytes into a multipart upload (io/s3_upload.h), read jobs fetch its segments with ranged GETs,
// in parallel, straight into their memory, and both compute or check the block checksums exactly as for files
// (io/block_checksums.h). All parallelism is the S3 client's: its calls run their requests concurrently.
#pragma once

#include <cstdint>
#include <memory>

#include "io/file_jobs.h"

namespace ckpt::io {

// An executor that hands jobs whose path is an S3 URL to an S3 executor, made on the first such job with
// s3::SharedClient(), and every other job to `local`. Its backend_name() is "s3" after an S3 job. `arena`:
// `local`'s arena, or null for an executor of caller memory only.
std::unique_ptr<FileJobExecutor> RouteObjectStoreJobs(std::unique_ptr<FileJobExecutor> local, char* arena,
                                                      uint64_t arena_size);

}  // namespace ckpt::io
