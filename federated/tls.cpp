#include "federated/tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <string>

#include "core/error.h"
#include "core/file_util.h"

namespace pare::federated {
namespace {

// The file's text; throws InputError naming it when it holds no PEM block of `kind`
// ("CERTIFICATE", "PRIVATE KEY").
std::string read_pem(const std::string& path, const char* kind) {
  if (path.empty()) return {};
  const std::string text = read_file(path);
  PARE_CHECK(text.find("-----BEGIN ") != std::string::npos && text.find(kind) != std::string::npos, "'", path,
             "' is not a PEM file with a ", kind, " (-----BEGIN ... ", kind, "-----)");
  return text;
}

// The options' structure: a certificate comes with its key, a server with a CA needs its own
// certificate, a client with a certificate or a server name needs the CA. Reads no file.
void check_pairing(const TlsOptions& t, bool server) {
  const char* ca_option = server ? "tls_client_ca" : "tls_ca";
  auto needs = [](const char* missing, const char* given, const char* why) {
    throw InputError(std::string(missing) + " is needed with " + given + " (" + why + ")").about(missing).about(given);
  };
  if (t.cert.empty() && !t.key.empty()) needs("tls_cert", "tls_key", "a certificate and its private key");
  if (t.key.empty() && !t.cert.empty()) needs("tls_key", "tls_cert", "a certificate and its private key");
  if (server && t.cert.empty() && !t.ca.empty()) needs("tls_cert", ca_option, "TLS needs the server's own certificate");
  if (!server && t.ca.empty() && !t.cert.empty())
    needs(ca_option, "tls_cert", "the CA that signed the server's certificate");
  if (!server && t.ca.empty() && !t.server_name.empty())
    needs(ca_option, "tls_server_name", "the CA that signed the server's certificate");
}

}  // namespace

void TlsOptions::validate(bool server) const {
  check_pairing(*this, server);
  read_pem(cert, "CERTIFICATE");
  read_pem(key, "PRIVATE KEY");
  read_pem(ca, "CERTIFICATE");
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsOptions& t) {
  if (!t.enabled()) return grpc::InsecureServerCredentials();
  check_pairing(t, true);
  grpc::SslServerCredentialsOptions o(t.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = read_pem(t.ca, "CERTIFICATE");
  o.pem_key_cert_pairs.push_back({read_pem(t.key, "PRIVATE KEY"), read_pem(t.cert, "CERTIFICATE")});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsOptions& t) {
  if (!t.enabled()) return grpc::InsecureChannelCredentials();
  check_pairing(t, false);
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = read_pem(t.ca, "CERTIFICATE");
  o.pem_private_key = read_pem(t.key, "PRIVATE KEY");
  o.pem_cert_chain = read_pem(t.cert, "CERTIFICATE");
  return grpc::SslCredentials(o);
}

}  // namespace pare::federated
