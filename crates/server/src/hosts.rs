//! The `Host` check against DNS rebinding: a web page on a name its owner re-points at
//! 127.0.0.1 is, to the browser, the same origin as a server on loopback, so same-site checks
//! (`sqs::refuse_browsers_of_other_sites`) let it through. What such a page cannot change is
//! the `Host` its requests carry: its own name. So a server that anyone reaching it may use
//! (no credentials) answers only requests for a loopback name, an IP address (a rebinding
//! needs a name), the host of `--public-url`, or a name given with `--allowed-host`; the admin
//! routes, on either listener, the same whatever the credentials. Signed requests are not
//! checked: SigV4 signs the `Host`, which a page cannot sign for. The names: here; the
//! middleware that asks them: `host_check.rs`.

use std::net::IpAddr;

/// The names, besides loopback ones and IP addresses, a request's `Host` may give.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// `names` as given (`--allowed-host`, the host of `--public-url`), any port or case.
    pub fn new(names: impl IntoIterator<Item = String>) -> AllowedHosts {
        AllowedHosts {
            names: names.into_iter().map(|n| normal(name_of(&n))).collect(),
        }
    }

    /// Whether a request with this `Host` header may be served. Without one (HTTP/1.0), it is
    /// no browser's: browsers always send it.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        let name = name_of(host);
        if name.parse::<IpAddr>().is_ok() {
            return true;
        }
        let name = normal(name);
        name == "localhost" || name.ends_with(".localhost") || self.names.contains(&name)
    }
}

/// The name of `host` without its port: `[::1]:9324` is `::1`, `Example.COM.:80`
/// `Example.COM.`.
fn name_of(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

/// A name as DNS compares it: lower case, without the root's dot.
fn normal(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Why a request for `host` is refused, with the flag that would allow it.
pub(crate) fn refusal(host: &str) -> String {
    format!(
        "Host {host:?} is not a name of this server: a web page on another name pointed at it (DNS rebinding) is refused; to serve under that name, start the server with --allowed-host {}",
        normal(name_of(host))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_ip_addresses_and_allowed_names_pass_other_names_do_not() {
        let allowed = AllowedHosts::new(["Queue.Internal:9324".to_string()]);
        for host in [
            "localhost:9324",
            "LOCALHOST",
            "app.localhost:1",
            "127.0.0.1:9324",
            "[::1]:9324",
            "[::1]",
            "10.0.0.7:80",
            "queue.internal",
            "queue.internal.:9999",
        ] {
            assert!(allowed.allows(Some(host)), "{host}");
        }
        for host in [
            "evil.example:9324",
            "localhost.evil.example",
            "127.0.0.1.nip.io:9324",
            "",
            "queue.internal.evil",
        ] {
            assert!(!allowed.allows(Some(host)), "{host}");
        }
        assert!(allowed.allows(None));
    }
}
