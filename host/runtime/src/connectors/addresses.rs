//! The network addresses network connectors (NATS, Kafka) may reach.
//!
//! A job spec names servers; the daemons connect to them, outside the
//! sandbox, and the JobManager even probes them at submit. Unchecked, a job
//! could make a daemon open connections to any host and port it can reach
//! (its own loopback services, the cluster's private network) and learn from
//! the error messages which ports answer. So, as file connectors use only
//! the directories the operator allows ([`super::confine`]), network
//! connectors reach only the addresses the operator allows
//! (`--allow-address`): none by default on a daemon, any for `weir run` and
//! `weir local` unless told otherwise.
//!
//! A rule is `HOST` (any port) or `HOST:PORT` (`[V6]:PORT` for an IPv6
//! address), or `*` (any address). Hosts are compared as written, without
//! case: a name is not resolved, so a rule for `broker.internal` does not
//! allow its IP address, nor the reverse. An address list in a spec
//! (`a:9092,b:9092`, `nats://user@host:4222`) is allowed only if every one
//! of its addresses is.

use std::sync::Arc;

/// Which addresses network connectors may reach. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct AllowedAddresses {
    rule: Rule,
    /// Appended to refusals: how to allow an address here.
    hint: Option<Arc<str>>,
}

#[derive(Debug, Clone, Default)]
enum Rule {
    /// None (a daemon's default).
    #[default]
    Nothing,
    /// Every address (`*`).
    Any,
    /// Those matching one of these.
    Only(Arc<[Pattern]>),
}

/// One allowed host, on one port or any.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// Lowercase, without IPv6 brackets.
    host: String,
    port: Option<u16>,
}

impl AllowedAddresses {
    /// No address at all: a job with a network connector is refused.
    pub fn none() -> AllowedAddresses {
        AllowedAddresses::default()
    }

    /// Any address.
    pub fn any() -> AllowedAddresses {
        AllowedAddresses {
            rule: Rule::Any,
            hint: None,
        }
    }

    /// The addresses `rules` allow (`HOST`, `HOST:PORT`, `[V6]:PORT` or
    /// `*`); none if `rules` is empty. An error names the rule that does
    /// not parse.
    pub fn parse<I, S>(rules: I) -> Result<AllowedAddresses, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut patterns = Vec::new();
        for rule in rules {
            let rule = rule.as_ref().trim();
            if rule == "*" {
                return Ok(AllowedAddresses::any());
            }
            let (host, port) = split_host_port(rule)
                .map_err(|why| format!("`{rule}`: {why} (expected HOST, HOST:PORT or *)"))?;
            patterns.push(Pattern { host, port });
        }
        Ok(AllowedAddresses {
            rule: if patterns.is_empty() {
                Rule::Nothing
            } else {
                Rule::Only(patterns.into())
            },
            hint: None,
        })
    }

    /// Ends every refusal with `hint` (how to allow an address here).
    pub fn with_hint(mut self, hint: impl Into<String>) -> AllowedAddresses {
        self.hint = Some(hint.into().into());
        self
    }

    /// Whether every address of `list` (comma-separated, each maybe with a
    /// `scheme://` and a `user@`; `default_port` where none is given) is
    /// allowed. The refusal names `who` and the first address refused.
    pub fn check(&self, who: &str, list: &str, default_port: u16) -> Result<(), String> {
        let refuse = |what: String| {
            let hint = self
                .hint
                .as_deref()
                .map(|h| format!(" ({h})"))
                .unwrap_or_default();
            Err(format!("{who}: {what}{hint}"))
        };
        let addresses = match endpoints(list, default_port) {
            Ok(a) => a,
            Err(why) => return refuse(format!("cannot read the address list `{list}`: {why}")),
        };
        for (host, port) in addresses {
            let allowed = match &self.rule {
                Rule::Nothing => false,
                Rule::Any => true,
                Rule::Only(patterns) => patterns
                    .iter()
                    .any(|p| p.host == host && p.port.is_none_or(|p| p == port)),
            };
            if !allowed {
                let shown = if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                };
                return refuse(format!(
                    "`{shown}` is not an address network connectors may reach here"
                ));
            }
        }
        Ok(())
    }
}

/// The `(host, port)` of every address of a comma-separated list (hosts
/// lowercase, IPv6 without brackets).
fn endpoints(list: &str, default_port: u16) -> Result<Vec<(String, u16)>, String> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim) {
        let item = item.split_once("://").map_or(item, |(_, rest)| rest);
        let item = item.rsplit_once('@').map_or(item, |(_, rest)| rest);
        let item = item
            .split_once('/')
            .map_or(item, |(authority, _)| authority);
        if item.is_empty() {
            return Err("an empty address".into());
        }
        let (host, port) = split_host_port(item)?;
        out.push((host, port.unwrap_or(default_port)));
    }
    Ok(out)
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6 address.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("`{p}` is not a port number"))
    };
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "an unclosed `[`".to_owned())?;
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, Some(port(p)?)),
                None => return Err(format!("`{after}` after `]`")),
            },
        }
    } else {
        match s.matches(':').count() {
            0 => (s, None),
            1 => {
                let (host, p) = s.split_once(':').expect("one colon");
                (host, Some(port(p)?))
            }
            // A bare IPv6 address.
            _ => (s, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err(format!("`{host}` is not a host"));
    }
    Ok((host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(rules: &[&str], list: &str) -> bool {
        AllowedAddresses::parse(rules)
            .unwrap()
            .check("source `in`", list, 4222)
            .is_ok()
    }

    #[test]
    fn nothing_is_allowed_by_default_and_everything_with_a_star() {
        assert!(!allowed(&[], "127.0.0.1:4222"));
        assert!(AllowedAddresses::none().check("x", "localhost", 1).is_err());
        assert!(allowed(&["*"], "anything.example:1,10.0.0.1:2"));
        assert!(AllowedAddresses::any().check("x", "a:1", 1).is_ok());
    }

    #[test]
    fn a_host_rule_allows_any_port_and_a_host_port_rule_one() {
        assert!(allowed(&["broker.internal"], "broker.internal:9092"));
        assert!(allowed(&["Broker.Internal"], "BROKER.internal:1"));
        assert!(allowed(&["127.0.0.1:4222"], "nats://127.0.0.1:4222"));
        assert!(
            allowed(&["127.0.0.1:4222"], "127.0.0.1"),
            "the default port"
        );
        assert!(!allowed(&["127.0.0.1:4222"], "127.0.0.1:4223"));
        assert!(
            !allowed(&["broker.internal"], "10.0.0.1:9092"),
            "not resolved"
        );
        assert!(!allowed(&["127.0.0.1"], "localhost:4222"));
        assert!(allowed(&["[::1]:4222"], "nats://[::1]:4222"));
        assert!(allowed(&["::1"], "[::1]:7"));
    }

    #[test]
    fn every_address_of_a_list_must_be_allowed() {
        let rules = ["a:1", "b"];
        assert!(allowed(&rules, "a:1,b:2"));
        assert!(allowed(&rules, " a:1 , PLAINTEXT://b:9 "));
        assert!(!allowed(&rules, "a:1,c:1"));
        assert!(allowed(&rules, "nats://user:secret@b:4222"));
        let err = AllowedAddresses::parse(rules)
            .unwrap()
            .with_hint("start the TaskManager with --allow-address")
            .check("sink `out`", "a:1,evil.example:25", 9092)
            .unwrap_err();
        assert_eq!(
            err,
            "sink `out`: `evil.example:25` is not an address network connectors may reach \
             here (start the TaskManager with --allow-address)"
        );
    }

    /// What the JobManager runs at submit and each TaskManager at deploy:
    /// a NATS source and a Kafka sink at addresses not allowed are refused,
    /// each named, and nothing connects to them.
    #[test]
    fn connectors_at_addresses_not_allowed_are_refused_without_being_contacted() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let spec = format!(
            "[job]\nname = \"net\"\n\n[[source]]\nid = \"orders\"\ntype = \"nats\"\n\
             url = \"nats://127.0.0.1:{port}\"\nstream = \"ORDERS\"\n\n[[sink]]\nid = \"out\"\n\
             type = \"kafka\"\nbootstrap_servers = \"127.0.0.1:{port}\"\ntopic = \"t\"\n\n\
             [[edge]]\nfrom = \"orders\"\nto = \"out\"\n"
        );
        let spec = crate::job::JobSpec::parse(&spec, "/specs/net.toml", &[]).unwrap();
        let graph = crate::job::JobGraph::from_spec(spec).unwrap();
        for addresses in [
            AllowedAddresses::none(),
            AllowedAddresses::parse(["127.0.0.1:1", "localhost"]).unwrap(),
        ] {
            let roots = super::super::AllowedRoots::none()
                .with_addresses(addresses.with_hint("start it with --allow-address"));
            let err = crate::local::check_connectors(&graph, &roots).unwrap_err();
            for who in ["source `orders`", "sink `out`"] {
                assert!(
                    err.contains(&format!(
                        "{who}: `127.0.0.1:{port}` is not an address network connectors may \
                         reach here (start it with --allow-address)"
                    )),
                    "{err}"
                );
            }
            assert_eq!(err.lines().count(), 2, "{err}");
        }
        let contacted = listener.accept();
        assert!(
            contacted
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "something connected: {contacted:?}"
        );
    }

    #[test]
    fn bad_rules_and_lists_are_errors_naming_them() {
        let err = AllowedAddresses::parse(["host:port"]).unwrap_err();
        assert!(
            err.contains("`host:port`") && err.contains("not a port"),
            "{err}"
        );
        assert!(AllowedAddresses::parse([":80"]).is_err());
        assert!(AllowedAddresses::parse(["[::1"]).is_err());
        assert!(!allowed(&["*"], "a:1,,b:2"), "an empty address");
        assert!(!allowed(&["*"], "a:99999"));
    }
}
