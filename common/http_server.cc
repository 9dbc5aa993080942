#include "common/http_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace ddprun {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::string HttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return s;
}

void SetCloseOnExec(int fd) {
  if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(Handler h, HttpServerOptions o)
      : handler(std::move(h)), options(o) {}

  void Accept();

  const Handler handler;
  const HttpServerOptions options;
  // Before io: the Sessions that io destroys last update it.
  std::atomic<int> open{0};
  net::io_context io;
  tcp::acceptor acceptor{io};
  net::steady_timer retry{io};
  std::vector<std::thread> threads;
};

namespace {

// One connection: read a request, answer it, again while keep-alive holds.
// Owned by the handlers in flight (shared_ptr); runs on its own strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* impl)
      : stream_(std::move(socket)), impl_(impl) {}
  ~Session() { impl_->open.fetch_sub(1); }

  void Read() {
    parser_.emplace();
    parser_->header_limit(
        static_cast<std::uint32_t>(impl_->options.max_header_bytes));
    parser_->body_limit(impl_->options.max_body_bytes);
    stream_.expires_after(impl_->options.read_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

 private:
  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream) return Close();
    if (ec == http::error::header_limit) {
      return Answer(Error(431, "request header fields too large\n"), false,
                    false);
    }
    if (ec == http::error::body_limit) {
      return Answer(Error(413, "request body too large\n"), false, false);
    }
    if (ec == beast::error::timeout || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == net::error::eof ||
        ec == http::error::partial_message) {
      return Close();
    }
    if (ec) return Answer(Error(400, "bad request\n"), false, false);

    const auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    const size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    req.query = q == std::string::npos ? "" : req.target.substr(q + 1);
    for (const auto& field : msg) {
      req.headers[Lower(std::string(field.name_string()))] =
          std::string(field.value());
    }
    req.body = msg.body();
    beast::error_code peer_ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(peer_ec);
    if (!peer_ec) req.peer = peer.address().to_string();
    const bool head = msg.method() == http::verb::head;
    Answer(impl_->handler(req), msg.keep_alive(), head);
  }

  static HttpResponse Error(int status, std::string text) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(text);
    return r;
  }

  void Answer(HttpResponse r, bool keep_alive, bool head) {
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(r.status));
    res_.set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res_.set(name, value);
    res_.keep_alive(keep_alive);
    res_.content_length(r.body.size());
    if (!head) res_.body() = std::move(r.body);
    keep_alive_ = keep_alive;
    stream_.expires_after(impl_->options.write_timeout);
    http::async_write(
        stream_, res_,
        beast::bind_front_handler(&Session::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, std::size_t) {
    if (ec) return Close();
    if (!keep_alive_) return Close();
    Read();
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  bool keep_alive_ = false;
  HttpServer::Impl* const impl_;
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(
      net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) {
          // Out of descriptors (EMFILE) or the like: try again shortly
          // instead of spinning or giving up the listener.
          retry.expires_after(std::chrono::milliseconds(100));
          retry.async_wait([this](beast::error_code e) {
            if (!e) Accept();
          });
          return;
        }
        SetCloseOnExec(socket.native_handle());
        if (open.load() >= options.max_connections) {
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          open.fetch_add(1);
          std::make_shared<Session>(std::move(socket), this)->Read();
        }
        Accept();
      });
}

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

StatusOr<int> HttpServer::Start(const std::string& host, int port,
                                Handler handler, HttpServerOptions options) {
  if (impl_) return FailedPreconditionError("HTTP server already started");
  std::string h = host;
  if (h == "localhost") h = "127.0.0.1";
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(h, ec);
  if (ec) {
    return InvalidArgumentError("HTTP host '" + host +
                                "' is not a numeric address");
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError("HTTP port " + std::to_string(port) +
                                " is out of range (0..65535)");
  }
  options.threads = std::max(1, options.threads);
  auto impl = std::make_unique<Impl>(std::move(handler), options);
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  const std::string where = host + ":" + std::to_string(port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) {
    SetCloseOnExec(impl->acceptor.native_handle());
    impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  }
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return UnavailableError("cannot listen on " + where + ": " + ec.message());
  }
  port_ = impl->acceptor.local_endpoint().port();
  impl->Accept();
  Impl* raw = impl.get();
  const int nice = options.nice;
  for (int i = 0; i < options.threads; ++i) {
    impl->threads.emplace_back([raw, nice] {
      // Linux: a thread's nice value is its own (PRIO_PROCESS with a tid).
      if (nice != 0) {
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
      }
      raw->io.run();
    });
  }
  impl_ = std::move(impl);
  return port_;
}

void HttpServer::Stop() {
  if (!impl_) return;
  impl_->io.stop();
  for (std::thread& t : impl_->threads) t.join();
  // Destroying the io_context destroys the pending operations and with
  // them every Session (its socket closes); the listener closes first.
  impl_.reset();
}

}  // namespace ddprun
