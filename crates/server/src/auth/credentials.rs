//! Access keys, read from a file in the format of AWS's own shared credentials file: one
//! profile per credential, with `aws_access_key_id`, `aws_secret_access_key` and Leasehold's
//! own `account_id` (twelve digits; 000000000000 when left out).

use std::collections::HashMap;
use std::path::Path;

use leasehold_engine::is_account_id;

/// The account a credential without `account_id` belongs to.
pub const DEFAULT_ACCOUNT: &str = "000000000000";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub account_id: String,
}

/// Every known credential, by access key id.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    by_key: HashMap<String, Credential>,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Credentials {
    /// The credentials of an AWS shared credentials file.
    pub fn from_file(path: &Path) -> Result<Credentials, CredentialsError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
            path: shown.clone(),
            source,
        })?;
        Credentials::parse(&text).map_err(|message| CredentialsError::Invalid {
            path: shown,
            message,
        })
    }

    /// Parses the file's text; the error names the profile (and its line) that is wrong.
    pub fn parse(text: &str) -> Result<Credentials, String> {
        let ini = ini::Ini::load_from_str_noescape(text).map_err(|e| e.to_string())?;
        let mut credentials = Vec::new();
        for (section, properties) in ini.iter() {
            let Some(profile) = section else {
                if let Some((key, _)) = properties.iter().next() {
                    return Err(format!(
                        "line {}: `{key}` is outside any [profile]",
                        line_of(text, key)
                    ));
                }
                continue;
            };
            let at = || {
                format!(
                    "line {}: profile [{profile}]",
                    line_of(text, &format!("[{profile}]"))
                )
            };
            for (key, _) in properties.iter() {
                if !["aws_access_key_id", "aws_secret_access_key", "account_id"].contains(&key) {
                    return Err(format!(
                        "{}: unknown key `{key}` (expected aws_access_key_id, aws_secret_access_key, account_id)",
                        at()
                    ));
                }
            }
            let required = |key: &str| {
                properties
                    .get(key)
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| format!("{}: `{key}` is missing", at()))
            };
            credentials.push(Credential {
                access_key_id: required("aws_access_key_id")?,
                secret_access_key: required("aws_secret_access_key")?,
                account_id: properties
                    .get("account_id")
                    .unwrap_or(DEFAULT_ACCOUNT)
                    .to_string(),
            });
        }
        Credentials::new(credentials)
    }

    /// Credentials from a list (the config file's `[[credentials]]`); each access key once,
    /// each account id twelve digits.
    pub fn new(list: Vec<Credential>) -> Result<Credentials, String> {
        let mut by_key = HashMap::new();
        for credential in list {
            if !is_account_id(&credential.account_id) {
                return Err(format!(
                    "account_id `{}` of access key {} is not twelve digits",
                    credential.account_id, credential.access_key_id
                ));
            }
            let key = credential.access_key_id.clone();
            if by_key.insert(key.clone(), credential).is_some() {
                return Err(format!("access key {key} is given twice"));
            }
        }
        if by_key.is_empty() {
            return Err("no credentials: expected at least one [profile] with aws_access_key_id and aws_secret_access_key".into());
        }
        Ok(Credentials { by_key })
    }

    /// Every credential, to merge with others.
    pub fn into_list(self) -> Vec<Credential> {
        self.by_key.into_values().collect()
    }

    pub fn get(&self, access_key_id: &str) -> Option<&Credential> {
        self.by_key.get(access_key_id)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// The line (from 1) where `needle` first appears, for error messages.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|line| line.contains(needle))
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_credentials_and_the_account_defaults_to_zeros() {
        let text = "# test keys\n[default]\naws_access_key_id = AKIDA\naws_secret_access_key = secret/a\n\n[other]\naws_access_key_id=AKIDB\naws_secret_access_key=b\naccount_id = 111111111111\n";
        let credentials = Credentials::parse(text).unwrap();
        assert_eq!(credentials.len(), 2);
        assert_eq!(
            credentials.get("AKIDA").unwrap().account_id,
            DEFAULT_ACCOUNT
        );
        assert_eq!(
            credentials.get("AKIDA").unwrap().secret_access_key,
            "secret/a"
        );
        assert_eq!(credentials.get("AKIDB").unwrap().account_id, "111111111111");
    }

    #[test]
    fn a_wrong_file_names_the_profile_and_its_line() {
        let missing =
            Credentials::parse("[a]\naws_access_key_id = K\n\n[b]\naws_access_key_id = L\n")
                .unwrap_err();
        assert_eq!(
            missing,
            "line 1: profile [a]: `aws_secret_access_key` is missing"
        );
        let account = Credentials::parse(
            "[a]\naws_access_key_id = K\naws_secret_access_key = s\naccount_id = 12\n",
        )
        .unwrap_err();
        assert!(account.contains("not twelve digits"), "{account}");
        let unknown = Credentials::parse("[a]\naws_access_key = K\n").unwrap_err();
        assert!(
            unknown.contains("unknown key `aws_access_key`"),
            "{unknown}"
        );
        let twice = Credentials::parse("[a]\naws_access_key_id = K\naws_secret_access_key = s\n[b]\naws_access_key_id = K\naws_secret_access_key = t\n").unwrap_err();
        assert_eq!(twice, "access key K is given twice");
        assert!(Credentials::parse("")
            .unwrap_err()
            .starts_with("no credentials"));
    }
}
