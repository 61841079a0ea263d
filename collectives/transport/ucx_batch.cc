#include "collectives/transport/ucx_batch.h"

#include <algorithm>

namespace ckpt::coll::ucx {

void Finish(Transfer* transfer, ucs_status_t status, uint64_t received) {
  transfer->request = nullptr;
  transfer->done = true;
  transfer->status = status;
  transfer->received = received;
  --transfer->batch->in_flight;
}

namespace {

void OnSendDone(void* request, ucs_status_t status, void* user_data) {
  Transfer* transfer = static_cast<Transfer*>(user_data);
  transfer->batch->ucx.request_free(request);
  Finish(transfer, status, 0);
}

void OnReceiveDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  Transfer* transfer = static_cast<Transfer*>(user_data);
  transfer->batch->ucx.request_free(request);
  Finish(transfer, status, status == UCS_OK ? info->length : 0);
}

ucp_request_param_t CallbackParam(Transfer& transfer) {
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = &transfer;
  return param;
}

std::string DescribeTransfer(const Transfer& transfer) {
  if (transfer.pull_ack && transfer.kind == Kind::kReceive) {
    return "send to " + RankName(transfer.peer) + " with tag " + std::to_string(transfer.tag) +
           " (waiting for the peer to read it)";
  }
  return std::string(transfer.kind == Kind::kSend ? "send to " : "receive from ") + RankName(transfer.peer) +
         " with tag " + std::to_string(transfer.tag);
}

}  // namespace

bool Batch::HasPendingWith(int peer) const {
  return std::any_of(transfers.begin(), transfers.end(),
                     [peer](const Transfer& transfer) { return transfer.peer == peer && !transfer.done; });
}

std::string RankName(int rank) { return "rank " + std::to_string(rank); }

Transfer& Begin(Batch& batch, Kind kind, int peer, uint64_t tag, uint64_t size) {
  ++batch.in_flight;
  return batch.transfers.emplace_back(Transfer{kind, peer, tag, size, &batch});
}

ucp_request_param_t SendParam(Transfer& transfer) {
  ucp_request_param_t param = CallbackParam(transfer);
  param.cb.send = OnSendDone;
  return param;
}

ucp_request_param_t ReceiveParam(Transfer& transfer) {
  ucp_request_param_t param = CallbackParam(transfer);
  // UCX 1.13 leaves recv_info unfilled when a receive completes immediately, so the received length could not be
  // checked: the callback, which gets it, must always run.
  param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = OnReceiveDone;
  return param;
}

void Track(Transfer& transfer, ucs_status_ptr_t posted) {
  if (transfer.done) return;
  if (UCS_PTR_IS_PTR(posted)) {
    transfer.request = posted;
  } else {
    Finish(&transfer, UCS_PTR_STATUS(posted), 0);
  }
}

Status Verdict(const Batch& batch) {
  if (!batch.failed_peers.empty()) {
    std::string message;
    for (const auto& [peer, reason] : batch.failed_peers) {
      message += (message.empty() ? "" : "; ") + RankName(peer) + ": " + reason;
    }
    if (!batch.timeout_detail.empty()) message += "; " + batch.timeout_detail;
    return PeerFailed(message);
  }
  if (!batch.timeout_detail.empty()) return Timeout(batch.timeout_detail);
  if (!batch.mismatch_detail.empty()) return Mismatch(batch.mismatch_detail);
  for (const Transfer& transfer : batch.transfers) {
    if (transfer.status == UCS_ERR_MESSAGE_TRUNCATED) {
      return Mismatch(DescribeTransfer(transfer) + ": the message is larger than the " + std::to_string(transfer.size) +
                      " bytes expected");
    }
    if (transfer.status != UCS_OK) {
      return PeerFailed(RankName(transfer.peer) + ": " + batch.ucx.status_string(transfer.status) + " (" +
                        DescribeTransfer(transfer) + ")");
    }
    if (transfer.kind == Kind::kReceive && transfer.received != transfer.size) {
      return Mismatch(DescribeTransfer(transfer) + ": received " + std::to_string(transfer.received) +
                      " bytes, expected " + std::to_string(transfer.size));
    }
  }
  return Status::Ok();
}

}  // namespace ckpt::coll::ucx
