#include "executor/comm/nccl_logic.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "executor/comm/comm.h"
#include "executor/launch/tcp_store.h"

namespace ptdp {

std::vector<Edge> NeighbourEdges(int n) {
  PTDP_CHECK(n >= 1);
  std::vector<Edge> edges;
  auto add = [&](int from, int to) {
    if (from == to) return;
    if (std::find(edges.begin(), edges.end(), Edge{from, to}) == edges.end()) {
      edges.push_back({from, to});
    }
  };
  for (int r = 0; r < n; ++r) add(r, (r + 1) % n);
  for (int r = 0; r < n; ++r) add(r, (r + n - 1) % n);
  return edges;
}

std::vector<std::vector<Edge>> EdgeRounds(int n) {
  std::vector<std::vector<Edge>> rounds;
  std::vector<std::vector<bool>> busy;  // busy[round][rank]
  for (const Edge& e : NeighbourEdges(n)) {
    size_t round = 0;
    while (round < rounds.size() &&
           (busy[round][static_cast<size_t>(e.from)] || busy[round][static_cast<size_t>(e.to)])) {
      ++round;
    }
    if (round == rounds.size()) {
      rounds.emplace_back();
      busy.emplace_back(static_cast<size_t>(n), false);
    }
    rounds[round].push_back(e);
    busy[round][static_cast<size_t>(e.from)] = busy[round][static_cast<size_t>(e.to)] = true;
  }
  return rounds;
}

SplitArgs EdgeSplit(const std::vector<Edge>& round, int rank) {
  for (size_t i = 0; i < round.size(); ++i) {
    if (round[i].from == rank) return {static_cast<int>(i), 0};
    if (round[i].to == rank) return {static_cast<int>(i), 1};
  }
  return {};
}

IdExchange IdOverStore(TcpStore& store, std::string key, size_t id_bytes) {
  return [&store, key = std::move(key), id_bytes](const std::string& root_id) {
    if (store.options().rank == 0) {
      PTDP_CHECK(root_id.size() == id_bytes);
      store.Set(key, root_id);
      return root_id;
    }
    std::string id = store.Get(key);
    if (id.size() != id_bytes) {
      throw StoreError(fmt::format(
          "TCP store {}:{} (rank {}): key \"{}\" holds {} bytes, an NCCL unique id has {} "
          "(another program on this MASTER_PORT?)",
          store.options().host, store.port(), store.options().rank, key, id.size(), id_bytes));
    }
    return id;
  };
}

IdExchange IdOverComm(Comm& world, size_t id_bytes) {
  return [&world, id_bytes](const std::string& root_id) {
    // Moved as int32 words (every Comm moves them); the id's size is a multiple of 4.
    PTDP_CHECK(id_bytes % 4 == 0);
    std::vector<int32_t> words(id_bytes / 4, 0);
    if (world.rank() == 0) {
      PTDP_CHECK(root_id.size() == id_bytes);
      std::memcpy(words.data(), root_id.data(), id_bytes);
    }
    world.Broadcast(Span{words.data(), DType::kI32, static_cast<int64_t>(words.size())}, 0);
    return std::string(reinterpret_cast<const char*>(words.data()), id_bytes);
  };
}

}  // namespace ptdp
