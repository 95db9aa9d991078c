//! HTTP client shared by the sources: auth, CA, timeout, retries, bounded body size.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{AuthConfig, HttpConfig, ScheduleConfig};
use crate::error::CollectError;
use crate::schedule::retry;

/// Bodies larger than this are refused: a kubelet summary of a 250-pod node is a few MiB, so
/// anything far bigger is a misconfigured endpoint and must not exhaust memory.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Token files are re-read this often, because projected service-account tokens rotate.
const TOKEN_FILE_TTL: Duration = Duration::from_secs(60);

enum Auth {
    None,
    Basic {
        username: String,
        password: Option<String>,
    },
    Bearer(String),
    BearerFile {
        path: PathBuf,
        cached: Mutex<(Instant, String)>,
    },
}

/// A configured client: one per source.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    auth: Auth,
    schedule: ScheduleConfig,
}

fn read_secret(path: &PathBuf) -> Result<String, CollectError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
        .map_err(|e| CollectError::Config(format!("cannot read {}: {e}", path.display())))
}

impl HttpClient {
    pub fn new(http: &HttpConfig, schedule: &ScheduleConfig) -> Result<Self, CollectError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(schedule.timeout)
            .user_agent(concat!("headroom-collectors/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &http.tls_ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                CollectError::Config(format!("cannot read tls_ca_file {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| CollectError::Config(format!("tls_ca_file {}: {e}", ca.display())))?;
            if certs.is_empty() {
                return Err(CollectError::Config(format!(
                    "tls_ca_file {} holds no PEM certificate",
                    ca.display()
                )));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| CollectError::Config(format!("cannot build the HTTP client: {e}")))?;
        let auth = match &http.auth {
            None => Auth::None,
            Some(AuthConfig::Basic {
                username,
                password,
                password_file,
            }) => {
                let password = match (password, password_file) {
                    (Some(p), _) => Some(p.clone()),
                    (None, Some(f)) => Some(read_secret(f)?),
                    (None, None) => None,
                };
                Auth::Basic {
                    username: username.clone(),
                    password,
                }
            }
            Some(AuthConfig::Bearer { token, token_file }) => match (token, token_file) {
                (Some(t), _) => Auth::Bearer(t.clone()),
                (None, Some(f)) => Auth::BearerFile {
                    cached: Mutex::new((Instant::now(), read_secret(f)?)),
                    path: f.clone(),
                },
                (None, None) => {
                    return Err(CollectError::Config(
                        "bearer auth needs `token` or `token_file`".into(),
                    ));
                }
            },
        };
        Ok(Self {
            client,
            auth,
            schedule: schedule.clone(),
        })
    }

    fn bearer_from_file(&self, path: &PathBuf, cached: &Mutex<(Instant, String)>) -> String {
        let mut guard = cached.lock().unwrap_or_else(|e| e.into_inner());
        if guard.0.elapsed() >= TOKEN_FILE_TTL {
            // Keep the old token if the file is briefly unreadable (it is swapped atomically
            // by the kubelet, but a rename race must not break collection).
            match read_secret(path) {
                Ok(token) => *guard = (Instant::now(), token),
                Err(e) => tracing::warn!(error = %e, "keeping the previous bearer token"),
            }
        }
        guard.1.clone()
    }

    /// GETs `url` with retries. Transport errors and HTTP 5xx/429 are retried with backoff;
    /// other answers (2xx, 4xx) are returned as status and body for the caller to interpret.
    pub async fn get(
        &self,
        url: &str,
        query: &[(&str, String)],
    ) -> Result<(u16, Vec<u8>), CollectError> {
        retry(&self.schedule, |_| self.get_once(url, query)).await
    }

    /// GETs and requires a 2xx answer.
    pub async fn get_ok(&self, url: &str) -> Result<Vec<u8>, CollectError> {
        let (status, body) = self.get(url, &[]).await?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(CollectError::Status {
                url: url.to_owned(),
                status,
                body: snippet(&body),
            })
        }
    }

    async fn get_once(
        &self,
        url: &str,
        query: &[(&str, String)],
    ) -> Result<(u16, Vec<u8>), CollectError> {
        let timeout = self.schedule.timeout;
        // The whole exchange, body included, runs under one deadline: a kubelet that sends
        // headers and then hangs must not hold a concurrency slot forever.
        match tokio::time::timeout(timeout, self.exchange(url, query)).await {
            Ok(result) => result,
            Err(_) => Err(CollectError::Timeout {
                url: url.to_owned(),
                timeout,
            }),
        }
    }

    async fn exchange(
        &self,
        url: &str,
        query: &[(&str, String)],
    ) -> Result<(u16, Vec<u8>), CollectError> {
        let timeout = self.schedule.timeout;
        let mut request = self.client.get(url);
        if !query.is_empty() {
            request = request.query(query);
        }
        request = match &self.auth {
            Auth::None => request,
            Auth::Basic { username, password } => request.basic_auth(username, password.as_ref()),
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::BearerFile { path, cached } => {
                request.bearer_auth(self.bearer_from_file(path, cached))
            }
        };
        let mut response = request
            .send()
            .await
            .map_err(|e| CollectError::from_reqwest(url, timeout, e))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| CollectError::from_reqwest(url, timeout, e))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(CollectError::Decode {
                    url: url.to_owned(),
                    message: format!("body larger than {MAX_BODY_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        if status >= 500 || status == 429 {
            // Retryable: surface as an error so `retry` tries again.
            return Err(CollectError::Status {
                url: url.to_owned(),
                status,
                body: snippet(&body),
            });
        }
        Ok((status, body))
    }
}

/// The start of a body, for error messages.
pub(crate) fn snippet(body: &[u8]) -> String {
    const MAX: usize = 300;
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX)]);
    let mut s = text.trim().replace(['\n', '\r'], " ");
    if body.len() > MAX {
        s.push('…');
    }
    s
}
