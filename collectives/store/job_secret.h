// The store's secret when the launcher gives none (CKPT_JOB_SECRET unset) and no user allgather can spread one:
// rank 0 makes a secret and writes it into a file that only its user can read, named after the store's port, and
// the ranks on rank 0's node read it there. Other users' processes cannot read it, so they cannot join the job;
// ranks on other nodes cannot either, and are told to set CKPT_JOB_SECRET.
//
// The file lives in a directory of the user's own, "$XDG_RUNTIME_DIR/ckpt" or else "/tmp/ckpt-<uid>", which must
// be a real directory (not a link) owned by the user and closed to everyone else; both are checked on every use.
#pragma once

#include <string>

#include "common/status.h"

namespace ckpt::coll {

class PublishedSecret {
 public:
  // Makes a new secret and writes it for the store listening on `port`, replacing what a previous job on that
  // port left behind.
  static Result<PublishedSecret> Publish(int port);
  PublishedSecret(PublishedSecret&& other) noexcept;
  PublishedSecret& operator=(PublishedSecret&& other) noexcept;
  // Removes the file: the secret is of no use once the store has stopped.
  ~PublishedSecret();

  const std::string& secret() const { return secret_; }

 private:
  PublishedSecret(std::string path, std::string secret) : path_(std::move(path)), secret_(std::move(secret)) {}
  std::string path_;
  std::string secret_;
};

// The secret rank 0 published for the store on `port`; kNotFound (saying how to set CKPT_JOB_SECRET) if this node
// has none, which is the case on every node but rank 0's.
Result<std::string> ReadPublishedSecret(int port);

}  // namespace ckpt::coll
