//! AWS Signature Version 4 for the few S3 requests `up` makes itself (create
//! the bucket, see that the credentials work). Pure: the clock is an argument.
//!
//! Only what those requests need: path-style URLs whose path is already
//! URI-encoded, an optional query string already in canonical form, and the
//! payload hashed into `x-amz-content-sha256` (always signed, as S3 wants).

use ring::{digest, hmac};

/// The service name in the credential scope.
const SERVICE: &str = "s3";
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Who signs.
#[derive(Debug, Clone, Copy)]
pub struct Signer<'a> {
    pub access_key: &'a str,
    pub secret_key: &'a str,
    pub region: &'a str,
}

/// One request to sign. `headers` are the headers besides `host`,
/// `x-amz-content-sha256` and `x-amz-date`, which are always signed.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    /// `host[:port]` as sent in the Host header.
    pub host: &'a str,
    /// Already URI-encoded, starting with `/`.
    pub path: &'a str,
    /// Canonical query string (sorted, encoded), empty for none.
    pub query: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    /// Hex SHA-256 of the body ([`payload_hash`]).
    pub payload_sha256: &'a str,
    /// `YYYYMMDDTHHMMSSZ` ([`amz_date`]).
    pub amz_date: &'a str,
}

/// Hex SHA-256 of a payload.
pub fn payload_hash(body: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, body).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac_sha256(key: &[u8], data: &str) -> hmac::Tag {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
}

/// The signed headers, lower-case and sorted, with their trimmed values.
fn signed_headers<'a>(r: &'a Request<'a>) -> Vec<(String, &'a str)> {
    let mut all: Vec<(String, &str)> = vec![
        ("host".into(), r.host),
        ("x-amz-content-sha256".into(), r.payload_sha256),
        ("x-amz-date".into(), r.amz_date),
    ];
    all.extend(
        r.headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim())),
    );
    all.sort();
    all
}

/// The canonical request of the specification.
pub fn canonical_request(r: &Request<'_>) -> String {
    let headers = signed_headers(r);
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let lines: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    format!(
        "{}\n{}\n{}\n{lines}\n{}\n{}",
        r.method,
        r.path,
        r.query,
        names.join(";"),
        r.payload_sha256
    )
}

/// The `Authorization` header's value.
pub fn authorization(s: &Signer<'_>, r: &Request<'_>) -> String {
    let date = r.amz_date.get(..8).unwrap_or(r.amz_date);
    let scope = format!("{date}/{}/{SERVICE}/aws4_request", s.region);
    let canonical = canonical_request(r);
    let to_sign = format!(
        "{ALGORITHM}\n{}\n{scope}\n{}",
        r.amz_date,
        payload_hash(canonical.as_bytes())
    );
    let k_date = hmac_sha256(format!("AWS4{}", s.secret_key).as_bytes(), date);
    let k_region = hmac_sha256(k_date.as_ref(), s.region);
    let k_service = hmac_sha256(k_region.as_ref(), SERVICE);
    let k_signing = hmac_sha256(k_service.as_ref(), "aws4_request");
    let signature = hex(hmac_sha256(k_signing.as_ref(), &to_sign).as_ref());
    let names: Vec<String> = signed_headers(r).into_iter().map(|(k, _)| k).collect();
    format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={}, Signature={signature}",
        s.access_key,
        names.join(";")
    )
}

/// `YYYYMMDDTHHMMSSZ` for `secs` seconds after the Unix epoch (UTC).
pub fn amz_date(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` days after 1970-01-01: shift the
/// epoch to 0000-03-01 so leap days end each 400-year era's years, then
/// split into eras, years of era, day of year and month (March first).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn the_empty_payload_hashes_to_the_well_known_value() {
        assert_eq!(payload_hash(b""), EMPTY_SHA256);
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        // 2013-05-24, the date of the specification's examples.
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        // A leap day, and the second before a new year.
        assert_eq!(amz_date(951_782_400 + 3_723), "20000229T010203Z");
        assert_eq!(amz_date(1_767_225_599), "20251231T235959Z");
    }

    /// The GET Object example of the S3 documentation ("Signature Calculations
    /// for the Authorization Header", examplebucket, a Range header): the
    /// published signature must come out.
    #[test]
    fn the_documented_get_object_example_signs_to_the_published_signature() {
        let signer = Signer {
            access_key: "AKIAIOSFODNN7EXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
        };
        let req = Request {
            method: "GET",
            host: "examplebucket.s3.amazonaws.com",
            path: "/test.txt",
            query: "",
            headers: &[("Range", "bytes=0-9")],
            payload_sha256: EMPTY_SHA256,
            amz_date: "20130524T000000Z",
        };
        assert_eq!(
            authorization(&signer, &req),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn the_canonical_request_lists_headers_sorted_with_a_blank_line_after() {
        let req = Request {
            method: "PUT",
            host: "10.101.255.1:20010",
            path: "/valkey-backups",
            query: "",
            headers: &[],
            payload_sha256: EMPTY_SHA256,
            amz_date: "20260101T000000Z",
        };
        assert_eq!(
            canonical_request(&req),
            format!(
                "PUT\n/valkey-backups\n\nhost:10.101.255.1:20010\nx-amz-content-sha256:{EMPTY_SHA256}\n\
                 x-amz-date:20260101T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
            )
        );
    }
}
