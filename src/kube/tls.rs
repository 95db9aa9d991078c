//! TLS for `serve`'s listeners, as Kubernetes components serve their secure ports: a
//! serving certificate from files, or a self-signed one generated at start when none is
//! configured (kube-scheduler does the same without `--tls-cert-file`); client
//! certificates verified against `serve.security.clientCAFile` when one is configured
//! (kube-scheduler presents its extender `tlsConfig.certFile`), optional otherwise, so
//! bearer-token callers connect too.
//!
//! The accept loop hands every request the verified client certificate's subject as a
//! [`PeerIdentity`] extension, which the authentication layer ([`super::auth`]) reads.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("serve.security.{field}: {path}: {message}")]
    File {
        /// The configuration field.
        field: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("serve.security: {0}")]
    Rustls(String),
}

/// Who a verified client certificate says the caller is: the subject's CN as the user name,
/// its O entries as groups (the Kubernetes convention for client certificates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The common name.
    pub user: String,
    /// The organisations.
    pub groups: Vec<String>,
}

impl PeerIdentity {
    /// The identity in a DER certificate; `None` when it has no common name.
    pub fn from_der(der: &[u8]) -> Option<PeerIdentity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let user = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())?
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Some(PeerIdentity { user, groups })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |message: String| TlsError::File {
        field,
        path: path.display().to_string(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The serving certificate chain and key: from `cert_file`/`key_file`, or self-signed for
/// `localhost`, the loopback addresses and this host's name.
pub fn serving_identity(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    match (cert_file, key_file) {
        (Some(c), Some(k)) => {
            let chain = certs("certFile", c)?;
            let key = PrivateKeyDer::from_pem_file(k).map_err(|e| TlsError::File {
                field: "keyFile",
                path: k.display().to_string(),
                message: e.to_string(),
            })?;
            Ok((chain, key))
        }
        (None, None) => {
            let mut names = vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
                "::1".to_string(),
            ];
            if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
                let h = h.trim();
                if !h.is_empty() {
                    names.push(h.to_string());
                }
            }
            let ck = rcgen::generate_simple_self_signed(names)
                .map_err(|e| TlsError::Rustls(format!("generating a self-signed certificate: {e}")))?;
            let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der())
                .map_err(|e| TlsError::Rustls(format!("self-signed key: {e}")))?;
            Ok((vec![ck.cert.der().clone()], key))
        }
        _ => Err(TlsError::Rustls(
            "certFile and keyFile go together (give both, or neither for a self-signed certificate)"
                .into(),
        )),
    }
}

/// A TLS acceptor serving `chain`/`key`; with `client_ca`, client certificates signed by it
/// are verified (and optional: callers without one authenticate by token).
pub fn acceptor(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<&Path>,
) -> Result<TlsAcceptor, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for c in certs("clientCAFile", path)? {
                roots.add(c).map_err(|e| TlsError::File {
                    field: "clientCAFile",
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(format!("serving certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` over TLS on `listener` until `shutdown`: each connection's verified client
/// certificate (if any) reaches the handlers as a [`PeerIdentity`] extension. A handshake
/// that fails is logged at debug level (port scanners, plain-HTTP clients).
pub async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| PeerIdentity::from_der(c));
            let app = match identity {
                Some(id) => app.layer(axum::Extension(id)),
                None => app,
            };
            let service = TowerToHyperService::new(app);
            if let Err(e) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_identity_serves_and_client_subjects_parse() {
        let (chain, key) = serving_identity(None, None).unwrap();
        assert_eq!(chain.len(), 1);
        acceptor(chain, key, None).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:kube-scheduler");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:schedulers");
        let k = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&k).unwrap();
        assert_eq!(
            PeerIdentity::from_der(cert.der()),
            Some(PeerIdentity {
                user: "system:kube-scheduler".into(),
                groups: vec!["system:schedulers".into()],
            })
        );
        assert!(PeerIdentity::from_der(b"not a certificate").is_none());
    }

    #[test]
    fn bad_files_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").unwrap();
        let e = serving_identity(Some(&junk), Some(&junk)).unwrap_err();
        assert!(e.to_string().contains("serve.security.certFile"), "{e}");
        let e = serving_identity(Some(&junk), None).unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
        let (chain, key) = serving_identity(None, None).unwrap();
        let Err(e) = acceptor(chain, key, Some(&dir.path().join("missing.pem"))) else {
            panic!("a missing CA file is an error");
        };
        assert!(e.to_string().contains("serve.security.clientCAFile"), "{e}");
    }
}
