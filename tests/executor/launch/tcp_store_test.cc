// The TCP store on 127.0.0.1 with an ephemeral port, ranks as threads: an exchange, a barrier,
// and each way a bootstrap can time out (short timeouts: the whole file runs in ~2 s).
#include "executor/launch/tcp_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace ptdp {
namespace {

TcpStoreOptions Options(int rank, int world, int port, double timeout_s) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout_s = timeout_s;
  return o;
}

// A port nobody listens on: bound, then closed.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t length = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TcpStore, RanksExchangeAnIdAndMeetAtBarriers) {
  constexpr int kWorld = 4;
  TcpStore root(Options(0, kWorld, 0, 10));
  ASSERT_GT(root.port(), 0);
  // An NCCL unique id is 128 arbitrary bytes, zeros included.
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 37);
  std::vector<std::future<std::string>> others;
  for (int r = 1; r < kWorld; ++r) {
    others.push_back(std::async(std::launch::async, [&, r] {
      TcpStore store(Options(r, kWorld, root.port(), 10));
      store.Barrier("up");
      const std::string got = store.Get("nccl-id");
      store.Add("sum", r);
      store.Barrier("added");
      const std::string sum = store.Get("sum");
      store.Barrier("done");
      return got + "/" + sum;
    }));
  }
  root.Barrier("up");
  root.Set("nccl-id", id);
  root.Barrier("added");
  EXPECT_EQ(root.Add("sum", 0), 1 + 2 + 3);
  root.Barrier("done");
  for (auto& f : others) EXPECT_EQ(f.get(), id + "/6");
}

TEST(TcpStore, GetTimesOutNamingTheKeyTheRankAndTheAddress) {
  TcpStore root(Options(0, 2, 0, 10));
  TcpStore one(Options(1, 2, root.port(), 0.2));
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf([&] { one.Get("nccl-id"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(error, "TCP store 127.0.0.1:" + std::to_string(root.port()) +
                       " (rank 1 of 2): timed out after 0.2 s waiting for key \"nccl-id\"");
  // The connection stays usable after a timeout.
  root.Set("nccl-id", "x");
  EXPECT_EQ(one.Get("nccl-id"), "x");
}

TEST(TcpStore, BarrierTimesOutWhenARankNeverComes) {
  TcpStore root(Options(0, 3, 0, 0.3));
  auto one = std::async(std::launch::async, [&] {
    TcpStore store(Options(1, 3, root.port(), 0.3));
    return ErrorOf([&] { store.Barrier("init"); });
  });
  const std::string error = ErrorOf([&] { root.Barrier("init"); });
  EXPECT_NE(error.find("(rank 0 of 3): barrier \"init\" timed out after 0.3 s: "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("of 3 ranks arrived"), std::string::npos) << error;
  const std::string other = one.get();
  EXPECT_NE(other.find("(rank 1 of 3): barrier \"init\" timed out"), std::string::npos) << other;
}

TEST(TcpStore, ConnectTimesOutWhenRankZeroNeverListens) {
  const int port = FreePort();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf([&] { TcpStore store(Options(2, 4, port, 0.3)); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(error.substr(0, error.find(" (Connection refused)")),
            "TCP store 127.0.0.1:" + std::to_string(port) +
                " (rank 2 of 4): could not connect within 0.3 s");
  EXPECT_NE(error.find("MASTER_ADDR and MASTER_PORT"), std::string::npos);
}

TEST(TcpStore, ALateRankZeroIsWaitedFor) {
  const int port = FreePort();
  auto one = std::async(std::launch::async, [&] {
    TcpStore store(Options(1, 2, port, 5));
    return store.Get("k");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  TcpStore root(Options(0, 2, port, 5));
  root.Set("k", "v");
  EXPECT_EQ(one.get(), "v");
}

TEST(TcpStore, ABusyPortIsRefusedNamingIt) {
  TcpStore root(Options(0, 2, 0, 1));
  const std::string error = ErrorOf([&] { TcpStore again(Options(0, 2, root.port(), 1)); });
  EXPECT_EQ(error, "TCP store 127.0.0.1:" + std::to_string(root.port()) +
                       " (rank 0 of 2): cannot listen on port " + std::to_string(root.port()) +
                       " (every interface): Address already in use");
}

}  // namespace
}  // namespace ptdp
