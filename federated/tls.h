// TLS for the federation's gRPC channel. Without it the channel is plaintext and the server
// trusts its network; with it the client checks the server's certificate against a CA, and with
// mutual TLS the server accepts only clients whose certificates that CA signed.
//
//   TlsOptions t;                 // the server
//   t.cert = "server.pem"; t.key = "server.key"; t.ca = "clients-ca.pem";  // ca: mutual TLS
//   builder.AddListeningPort(addr, server_credentials(t), &port);
//
//   TlsOptions c;                 // a client
//   c.ca = "ca.pem"; c.cert = "client.pem"; c.key = "client.key";
//   grpc::CreateCustomChannel(addr, channel_credentials(c), args);
#pragma once

#include <memory>
#include <string>

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace pare::federated {

/// PEM files; all empty: plaintext.
struct TlsOptions {
  std::string cert;         ///< this side's certificate chain (the server's; a client's for mutual TLS)
  std::string key;          ///< its private key
  std::string ca;           ///< server: the CA client certificates must chain to (mutual TLS); client: the server's CA
  std::string server_name;  ///< client: the name the server's certificate must carry (default: the host dialled)

  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty() || !server_name.empty(); }
  /// Throws InputError naming the options (tls_cert, tls_key, tls_ca; a server's CA is
  /// tls_client_ca) when cert and key are not given together, when a server has a CA but no
  /// certificate of its own, or a TLS client has no CA; and naming the file when one cannot be
  /// read or holds no PEM block.
  void validate(bool server) const;
};

/// The server's listening credentials: TLS (mutual when `t.ca` is set) or plaintext.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsOptions& t);

/// A client's channel credentials: TLS against `t.ca` (with its own certificate when given) or
/// plaintext.
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsOptions& t);

}  // namespace pare::federated
