#include "src/tags.h"

#include <cstddef>
#include <cstring>
#include <new>

namespace braid {

namespace {

bool matches(const TagOp& op, int peer, int tag) { return (op.peer == kAnySource || op.peer == peer) && op.tag == tag; }

Status goneError(const TagOp& op) {
  if (op.peer == kAnySource)
    return errorf(braidRemoteError,
                  "a tagged receive (tag %d) from any rank: every other rank left the communicator "
                  "(braidCommDestroy) without sending a message it matches",
                  op.tag);
  return errorf(braidRemoteError,
                "a tagged receive (tag %d) from rank %d: that rank left the communicator (braidCommDestroy) without "
                "sending a message it matches",
                op.tag, op.peer);
}

Status lengthError(const TagOp& op, int peer, uint64_t got) {
  return errorf(braidInvalidUsage,
                "a tagged receive of %llu bytes (tag %d) met a message of %llu bytes from rank %d: the lengths must "
                "be equal",
                static_cast<unsigned long long>(op.bytes), op.tag, static_cast<unsigned long long>(got), peer);
}

}  // namespace

void TagMatcher::init(std::vector<Link*> links) {
  peers_.assign(links.size(), Peer{});
  for (size_t p = 0; p < links.size(); ++p) peers_[p].link = links[p];
}

Status TagMatcher::postSend(TagOp* op) {
  Link* link = peers_[op->peer].link;
  if (op->tag != kByeTag) {
    peers_[op->peer].sentTo = true;
    op->index = ++peers_[op->peer].sent;
  }
  op->header = TagHeader{kTagMagic, op->tag, op->bytes};
  op->headerX = Xfer{};
  op->headerX.data = &op->header;
  op->headerX.bytes = sizeof(TagHeader);
  BRAID_TRY(link->postSend(&op->headerX));
  op->payloadX = Xfer{};
  if (op->bytes > 0) {
    op->payloadX.data = op->buf;
    op->payloadX.bytes = op->bytes;
    BRAID_TRY(link->postSend(&op->payloadX));
  } else {
    op->payloadX.complete = true;
  }
  inflight_.push_back(op);
  return okStatus();
}

void TagMatcher::postRecv(TagOp* op) {
  // An unexpected message that arrived already: the earliest that matches, which keeps each
  // (peer, tag) pair in order and hands an any-source receive the first sender to arrive.
  for (Unexpected& u : arrived_) {
    if (u.claimed || !matches(*op, u.peer, u.tag)) continue;
    u.claimed = true;
    op->source = u.peer;
    if (u.bytes != op->bytes) {
      op->error = lengthError(*op, u.peer, u.bytes);
      u.discard = true;
      ready_.push_back(op);
      return;
    }
    op->from = &u;
    inflight_.push_back(op);
    return;
  }
  if (!canArrive(*op)) {
    op->error = goneError(*op);
    ready_.push_back(op);
    return;
  }
  posted_.push_back(op);
  if (op->peer == kAnySource) {
    ++anyWaiting_;
  } else {
    ++peers_[op->peer].waiting;
  }
}

bool TagMatcher::canArrive(const TagOp& op) const {
  if (op.peer != kAnySource) return !peers_[op.peer].left;
  for (const Peer& p : peers_)
    if (p.link != nullptr && !p.left) return true;
  return false;
}

void TagMatcher::onGoodbye(int peer) {
  peers_[peer].left = true;
  for (size_t i = 0; i < posted_.size();) {
    TagOp* op = posted_[i];
    if (canArrive(*op)) {
      ++i;
      continue;
    }
    unpost(op);  // erases posted_[i]
    op->error = goneError(*op);
    ready_.push_back(op);
  }
}

void TagMatcher::peerLeft(int peer, uint64_t delivered) {
  if (!peers_[peer].left) onGoodbye(peer);
  peers_[peer].reading = false;
  size_t kept = 0;
  for (TagOp* op : inflight_) {
    // Transfers on the closed link that it did not finish (a finished one goes back from poll()).
    const bool stuck = op->isSend ? op->peer == peer && !(op->headerX.complete && op->payloadX.complete)
                                  : op->from == nullptr && op->source == peer && !op->payloadX.complete;
    if (stuck && op->isSend && op->index != 0 && op->index <= delivered) {
      ready_.push_back(op);  // it arrived: the leaver said so
    } else if (stuck) {
      op->error =
          errorf(braidRemoteError, "rank %d left the communicator (braidCommDestroy) during a tagged %s of tag %d",
                 peer, op->isSend ? "send to it" : "receive from it", op->tag);
      ready_.push_back(op);
    } else {
      inflight_[kept++] = op;
    }
  }
  inflight_.resize(kept);
}

Status TagMatcher::postByes(int* posted) {
  byes_.clear();
  byes_.reserve(peers_.size());  // no reallocation: the link holds pointers into it
  *posted = 0;
  for (size_t p = 0; p < peers_.size(); ++p) {
    if (peers_[p].link == nullptr || !peers_[p].sentTo) continue;
    TagOp& bye = byes_.emplace_back();
    bye.isSend = true;
    bye.peer = static_cast<int>(p);
    bye.tag = kByeTag;
    BRAID_TRY(postSend(&bye));
    ++*posted;
  }
  return okStatus();
}

void TagMatcher::unpost(TagOp* op) {
  for (size_t i = 0; i < posted_.size(); ++i) {
    if (posted_[i] != op) continue;
    posted_.erase(posted_.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  if (op->peer == kAnySource) {
    --anyWaiting_;
  } else {
    --peers_[op->peer].waiting;
  }
}

void TagMatcher::dropUnexpected(Unexpected* u) {
  for (auto it = arrived_.begin(); it != arrived_.end(); ++it) {
    if (&*it != u) continue;
    arrived_.erase(it);
    return;
  }
}

Status TagMatcher::readHeader(int peer) {
  Peer& p = peers_[peer];
  p.headerX = Xfer{};
  p.headerX.data = &p.header;
  p.headerX.bytes = sizeof(TagHeader);
  p.headerX.capacity = sizeof(TagHeader);
  BRAID_TRY(p.link->postRecv(&p.headerX));
  p.reading = true;
  return okStatus();
}

Status TagMatcher::onHeader(int peer, std::vector<TagOp*>* done) {
  const TagHeader h = peers_[peer].header;
  if (h.magic != kTagMagic || h.bytes > static_cast<uint64_t>(PTRDIFF_MAX))
    return errorf(braidRemoteError, "rank %d sent a malformed tagged message header (magic %08x, %llu bytes)", peer,
                  h.magic, static_cast<unsigned long long>(h.bytes));
  if (h.tag == kByeTag && h.bytes == 0) {
    onGoodbye(peer);
    return okStatus();
  }
  ++peers_[peer].received;
  Link* link = peers_[peer].link;
  TagOp* op = nullptr;
  for (TagOp* p : posted_) {
    if (!matches(*p, peer, h.tag)) continue;
    op = p;
    break;
  }
  if (op != nullptr) {
    unpost(op);
    op->source = peer;
    if (h.bytes == op->bytes) {
      if (h.bytes == 0) {
        done->push_back(op);
        return okStatus();
      }
      op->payloadX = Xfer{};
      op->payloadX.data = op->buf;
      op->payloadX.bytes = h.bytes;
      op->payloadX.capacity = h.bytes;
      BRAID_TRY(link->postRecv(&op->payloadX));
      inflight_.push_back(op);
      return okStatus();
    }
    // The payload still has to leave the link: it is read into a buffer that is then dropped.
    op->error = lengthError(*op, peer, h.bytes);
    done->push_back(op);
  }
  Unexpected& u = arrived_.emplace_back();
  u.peer = peer;
  u.tag = h.tag;
  u.bytes = h.bytes;
  u.claimed = u.discard = op != nullptr;
  if (h.bytes == 0) {
    u.x.complete = true;
    return okStatus();
  }
  try {
    u.data.resize(h.bytes);
  } catch (const std::bad_alloc&) {
    return errorf(braidSystemError, "out of memory for a tagged message of %llu bytes from rank %d (tag %d)",
                  static_cast<unsigned long long>(h.bytes), peer, h.tag);
  }
  u.x.data = u.data.data();
  u.x.bytes = h.bytes;
  u.x.capacity = h.bytes;
  return link->postRecv(&u.x);
}

void TagMatcher::deliver(TagOp* op, Unexpected* u) {
  if (u->bytes > 0) memcpy(op->buf, u->data.data(), u->bytes);
  dropUnexpected(u);
  op->from = nullptr;
}

Status TagMatcher::poll(std::vector<TagOp*>* done, int* failedPeer, bool* progressed) {
  for (size_t p = 0; p < peers_.size(); ++p) {
    if (!peers_[p].reading || !peers_[p].headerX.complete) continue;
    peers_[p].reading = false;
    *progressed = true;
    Status s = onHeader(static_cast<int>(p), done);
    if (!s.ok()) {
      *failedPeer = static_cast<int>(p);
      return s;
    }
  }
  size_t kept = 0;
  for (TagOp* op : inflight_) {
    bool finished = false;
    if (op->isSend) {
      finished = op->headerX.complete && op->payloadX.complete;
    } else if (op->from != nullptr) {
      finished = op->from->x.complete;
      if (finished) deliver(op, op->from);
    } else {
      finished = op->payloadX.complete;
    }
    if (finished) {
      done->push_back(op);
      *progressed = true;
    } else {
      inflight_[kept++] = op;
    }
  }
  inflight_.resize(kept);
  for (auto it = arrived_.begin(); it != arrived_.end();) {
    it = it->discard && it->x.complete ? arrived_.erase(it) : std::next(it);
  }
  for (size_t p = 0; p < peers_.size(); ++p) {
    if (peers_[p].reading || !wantsHeaders(static_cast<int>(p))) continue;
    Status s = readHeader(static_cast<int>(p));
    if (!s.ok()) {
      *failedPeer = static_cast<int>(p);
      return s;
    }
    *progressed = true;
  }
  // Receives that failed at post or on a goodbye.
  if (!ready_.empty()) {
    done->insert(done->end(), ready_.begin(), ready_.end());
    ready_.clear();
    *progressed = true;
  }
  return okStatus();
}

void TagMatcher::clear() {
  posted_.clear();
  inflight_.clear();
  ready_.clear();
  anyWaiting_ = 0;
  for (Peer& p : peers_) p.waiting = 0;
}

std::string TagMatcher::describe(const TagOp& op, const std::string& peerName) {
  char buf[96];
  snprintf(buf, sizeof(buf), "a tagged %s of %llu bytes (tag %d) %s ", op.isSend ? "send" : "receive",
           static_cast<unsigned long long>(op.bytes), op.tag, op.isSend ? "to" : "from");
  return buf + peerName;
}

}  // namespace braid
