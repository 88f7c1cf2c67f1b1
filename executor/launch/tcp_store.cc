#include "executor/launch/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace ptdp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxValueBytes = 64u << 20;

Clock::time_point Deadline(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(seconds, 0.0)));
}

int MsLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// Writes all of `data` (blocking socket); false when the peer is gone.
bool SendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `bytes` bytes before `deadline`; "" on success, else why not.
std::string RecvAll(int fd, char* out, size_t bytes, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, MsLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return std::strerror(errno);
    if (ready == 0) return "no answer in time";
    const ssize_t n = ::recv(fd, out + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) return "the store closed the connection (has rank 0 ended?)";
    done += static_cast<size_t>(n);
  }
  return "";
}

}  // namespace

// Rank 0's server: one thread polling the listening socket, the clients and a wake-up pipe.
class TcpStore::Server {
 public:
  // Listens on every interface (IPv6 with IPv4 mapped where the host has IPv6, else IPv4);
  // *port 0 picks an ephemeral port and returns it.
  Server(int* port, const std::function<void(const std::string&)>& fail) {
    listen_fd_ = Listen(AF_INET6, *port);
    if (listen_fd_ < 0) listen_fd_ = Listen(AF_INET, *port);
    if (listen_fd_ < 0) {
      fail(fmt::format("cannot listen on port {} (every interface): {}", *port,
                       std::strerror(listen_errno_)));
    }
    sockaddr_storage addr{};
    socklen_t length = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length);
    *port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (::pipe(wake_) != 0) fail(fmt::format("pipe: {}", std::strerror(errno)));
    thread_ = std::thread([this] { Serve(); });
  }
  ~Server() {
    if (wake_[1] >= 0) {
      const char c = 'q';
      (void)!::write(wake_[1], &c, 1);
    }
    if (thread_.joinable()) thread_.join();
    for (const Client& c : clients_) ::close(c.fd);
    for (const int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

 private:
  struct Client {
    int fd;
    std::string in;
  };

  int Listen(int family, int port) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      listen_errno_ = errno;
      return -1;
    }
    const int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = 0;
    if (family == AF_INET6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(fd, 1024) != 0) {
      listen_errno_ = errno;
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void Serve() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_.push_back({fd, ""});
        }
      }
      // Clients that closed or spoke garbage are dropped; the others are answered.
      std::vector<int> gone;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Client& c = clients_[i - 2];
        char buffer[65536];
        const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
        if (n <= 0 || !Handle(c, std::string_view(buffer, static_cast<size_t>(n)))) {
          gone.push_back(c.fd);
        }
      }
      for (const int fd : gone) {
        ::close(fd);
        std::erase_if(clients_, [fd](const Client& c) { return c.fd == fd; });
      }
    }
  }

  // Appends `bytes` to the client's input and answers every complete request in it.
  bool Handle(Client& c, std::string_view bytes) {
    c.in.append(bytes);
    for (;;) {
      if (c.in.size() < 5) return true;
      const uint32_t key_bytes = GetU32(c.in.data() + 1);
      if (key_bytes > kMaxKeyBytes) return false;
      if (c.in.size() < 9 + key_bytes) return true;
      const uint32_t value_bytes = GetU32(c.in.data() + 5 + key_bytes);
      if (value_bytes > kMaxValueBytes) return false;
      const size_t total = 9 + size_t{key_bytes} + value_bytes;
      if (c.in.size() < total) return true;
      const char op = c.in[0];
      const std::string key = c.in.substr(5, key_bytes);
      const std::string value = c.in.substr(9 + key_bytes, value_bytes);
      c.in.erase(0, total);
      std::string answer;
      if (op == 'S') {
        data_[key] = value;
        answer = "y";
        PutU32(answer, 0);
      } else if (op == 'C') {
        const auto it = data_.find(key);
        answer = it == data_.end() ? "n" : "y";
        const std::string& found = it == data_.end() ? std::string() : it->second;
        PutU32(answer, static_cast<uint32_t>(found.size()));
        answer += found;
      } else if (op == 'A') {
        const auto it = data_.find(key);
        int64_t sum = 0;
        try {
          sum = (it == data_.end() ? 0 : std::stoll(it->second)) + std::stoll(value);
        } catch (const std::exception&) {
          return false;  // not integers: a client bug, not the server's end
        }
        data_[key] = std::to_string(sum);
        answer = "y";
        PutU32(answer, static_cast<uint32_t>(data_[key].size()));
        answer += data_[key];
      } else {
        return false;
      }
      if (!SendAll(c.fd, answer)) return false;
    }
  }

  int listen_fd_ = -1;
  int listen_errno_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Client> clients_;
  std::map<std::string, std::string> data_;
  std::thread thread_;
};

TcpStore::TcpStore(const TcpStoreOptions& options) : options_(options) {
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    Fail(fmt::format("rank {} is not in a world of {}", options_.rank, options_.world_size));
  }
  if (options_.rank == 0) {
    server_ =
        std::make_unique<Server>(&options_.port, [this](const std::string& what) { Fail(what); });
  }
  // Rank 0 reaches its own server through the loopback interface.
  const std::string host = options_.rank == 0 ? "127.0.0.1" : options_.host;
  const Clock::time_point deadline = Deadline(options_.timeout_s);
  std::string last_error = "no address";
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(options_.port);
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (rc != 0) {
      last_error = fmt::format("cannot resolve \"{}\": {}", host, gai_strerror(rc));
    }
    for (addrinfo* a = rc == 0 ? found : nullptr; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    if (found != nullptr) ::freeaddrinfo(found);
    if (fd_ >= 0) return;
    if (Clock::now() >= deadline) {
      server_.reset();
      Fail(
          fmt::format("could not connect within {} s ({}); is rank 0 running, and are "
                      "MASTER_ADDR and MASTER_PORT the same on every rank?",
                      options_.timeout_s, last_error));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::Fail(const std::string& what) const {
  throw StoreError(fmt::format("TCP store {}:{} (rank {} of {}): {}", options_.host, options_.port,
                               options_.rank, options_.world_size, what));
}

bool TcpStore::Request(char op, const std::string& key, const std::string& value,
                       std::string* answer) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) {
    Fail(fmt::format("key \"{}\" or its value is too large ({} and {} bytes)", key, key.size(),
                     value.size()));
  }
  std::string message(1, op);
  PutU32(message, static_cast<uint32_t>(key.size()));
  message += key;
  PutU32(message, static_cast<uint32_t>(value.size()));
  message += value;
  if (!SendAll(fd_, message)) {
    Fail(fmt::format("sending a request for key \"{}\": {}", key, std::strerror(errno)));
  }
  // The server answers at once; a generous bound catches a dead or stopped rank 0.
  const Clock::time_point deadline = Deadline(std::max(options_.timeout_s, 1.0));
  char head[5];
  std::string why = RecvAll(fd_, head, sizeof head, deadline);
  if (why.empty()) {
    answer->resize(GetU32(head + 1));
    why = RecvAll(fd_, answer->data(), answer->size(), deadline);
  }
  if (!why.empty()) Fail(fmt::format("waiting for the answer about key \"{}\": {}", key, why));
  return head[0] == 'y';
}

void TcpStore::Set(const std::string& key, const std::string& value) {
  std::string answer;
  Request('S', key, value, &answer);
}

std::string TcpStore::Get(const std::string& key) {
  const Clock::time_point deadline = Deadline(options_.timeout_s);
  auto pause = std::chrono::milliseconds(1);
  std::string value;
  while (!Request('C', key, "", &value)) {
    if (Clock::now() >= deadline) {
      Fail(fmt::format("timed out after {} s waiting for key \"{}\"", options_.timeout_s, key));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  return value;
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  std::string answer;
  Request('A', key, std::to_string(delta), &answer);
  return std::stoll(answer);
}

void TcpStore::Barrier(const std::string& name) {
  const std::string count_key = "barrier/" + name;
  const std::string done_key = count_key + "/done";
  if (Add(count_key, 1) == options_.world_size) Set(done_key, "1");
  try {
    Get(done_key);
  } catch (const StoreError&) {
    const int64_t arrived = Add(count_key, 0);
    Fail(fmt::format("barrier \"{}\" timed out after {} s: {} of {} ranks arrived", name,
                     options_.timeout_s, arrived, options_.world_size));
  }
}

}  // namespace ptdp
