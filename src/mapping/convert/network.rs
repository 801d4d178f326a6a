//! Network addresses: `inet` and `cidr` from `address` or `address/prefix` strings (IPv4 or
//! IPv6), and `macaddr` / `macaddr8` from MAC address strings, in the forms PostgreSQL's
//! send functions write. inet and cidr: the family (2 for IPv4, 3 for IPv6: PostgreSQL's own
//! `PGSQL_AF_INET`/`PGSQL_AF_INET6`, not the system's), the prefix length, whether it is a
//! cidr, the address's length in bytes, then the address. A cidr with bits set right of its
//! prefix is refused, as PostgreSQL refuses it; an inet keeps them (that is what inet is for).

use std::net::IpAddr;

use bytes::{BufMut, BytesMut};

/// PostgreSQL's address families in the binary form.
const PGSQL_AF_INET: u8 = 2;
const PGSQL_AF_INET6: u8 = 3;

/// An IP address with its prefix length, as inet and cidr hold them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Net {
    pub(super) addr: IpAddr,
    pub(super) bits: u8,
}

/// Writes `s` as an inet (`cidr = false`) or a cidr.
pub(super) fn write_inet(s: &str, cidr: bool, out: &mut BytesMut) -> Result<(), String> {
    let net = parse_net(s, cidr)?;
    let (family, size) = match net.addr {
        IpAddr::V4(_) => (PGSQL_AF_INET, 4),
        IpAddr::V6(_) => (PGSQL_AF_INET6, 16),
    };
    out.put_u8(family);
    out.put_u8(net.bits);
    out.put_u8(u8::from(cidr));
    out.put_u8(size);
    match net.addr {
        IpAddr::V4(a) => out.put_slice(&a.octets()),
        IpAddr::V6(a) => out.put_slice(&a.octets()),
    }
    Ok(())
}

/// `address` or `address/prefix`, the address as `std::net` reads it (dotted quad with no
/// leading zeros, or any RFC 4291 IPv6 form without a zone). Without a prefix the address is a
/// single host (/32, /128), for cidr as for inet; PostgreSQL's abbreviated classful cidr input
/// (`10/8`, `192.168`) is refused rather than guessed.
pub(super) fn parse_net(s: &str, cidr: bool) -> Result<Net, String> {
    let what = if cidr { "cidr" } else { "inet" };
    let (address, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = address.parse().map_err(|_| {
        format!("{s:?} is not a valid {what} (an IPv4 or IPv6 address, optionally /prefix)")
    })?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits = match prefix {
        None => max,
        Some(p) => {
            if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{s:?}: the prefix length {p:?} is not a number"));
            }
            let bits: u8 = p
                .parse()
                .map_err(|_| format!("{s:?}: prefix {p} is too long"))?;
            if bits > max {
                return Err(format!(
                    "{s:?}: prefix /{bits} is longer than the address's {max} bits"
                ));
            }
            bits
        }
    };
    if cidr {
        let host_bits = match addr {
            IpAddr::V4(a) => u128::from(u32::from(a)) & (u128::from(u32::MAX) >> bits),
            IpAddr::V6(a) => u128::from(a) & u128::MAX.checked_shr(u32::from(bits)).unwrap_or(0),
        };
        if host_bits != 0 {
            return Err(format!(
                "{s:?} has bits set to the right of its /{bits} mask, which a cidr cannot hold (use inet, or the network address)"
            ));
        }
    }
    Ok(Net { addr, bits })
}

/// A MAC address of `len` bytes (6 for macaddr, 8 for macaddr8). Accepted: byte pairs of hex
/// digits separated by `:` or `-` (`08:00:2b:01:02:03`), groups of four separated by `.`
/// (`0800.2b01.0203`), or the bare digits; either case. A 6-byte address into macaddr8
/// becomes its EUI-64 form with `ff:fe` in the middle, as PostgreSQL converts it.
pub(super) fn write_mac(s: &str, len: usize, out: &mut BytesMut) -> Result<(), String> {
    let bytes = parse_mac(s, len)?;
    out.put_slice(&bytes);
    Ok(())
}

/// The bytes of a MAC address as `write_mac` accepts it, `len` of them.
pub(super) fn parse_mac(s: &str, len: usize) -> Result<Vec<u8>, String> {
    let what = if len == 6 { "macaddr" } else { "macaddr8" };
    let bad = || format!("{s:?} is not a {what} (e.g. 08:00:2b:01:02:03)");
    let separator = s.chars().find(|c| matches!(c, ':' | '-' | '.'));
    let digits: String = match separator {
        None => s.to_string(),
        Some(sep) => {
            let group = if sep == '.' { 4 } else { 2 };
            let groups: Vec<&str> = s.split(sep).collect();
            if groups.iter().any(|g| g.len() != group) {
                return Err(bad());
            }
            groups.concat()
        }
    };
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut bytes: Vec<u8> = (0..digits.len() / 2)
        .map(|i| u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).expect("hex digits"))
        .collect();
    if digits.len() % 2 != 0 {
        return Err(bad());
    }
    if len == 8 && bytes.len() == 6 {
        bytes.splice(3..3, [0xff, 0xfe]);
    }
    if bytes.len() != len {
        return Err(bad());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    /// `inet_recv`/`cidr_recv`'s reading, strict about every byte, as PostgreSQL's text
    /// output would print it (`network_out`: the prefix shown for inet only when it is not a
    /// single host, always for cidr).
    fn decode(bytes: &[u8]) -> String {
        let (family, bits, is_cidr, nb) = (bytes[0], bytes[1], bytes[2], bytes[3]);
        assert_eq!(bytes.len(), 4 + nb as usize);
        let addr: IpAddr = match (family, nb) {
            (2, 4) => Ipv4Addr::from(<[u8; 4]>::try_from(&bytes[4..]).unwrap()).into(),
            (3, 16) => Ipv6Addr::from(<[u8; 16]>::try_from(&bytes[4..]).unwrap()).into(),
            other => panic!("family/size {other:?}"),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        assert!(bits <= max);
        assert!(is_cidr <= 1);
        if is_cidr == 1 || bits != max {
            format!("{addr}/{bits}")
        } else {
            addr.to_string()
        }
    }

    fn inet(s: &str, cidr: bool) -> Result<String, String> {
        let mut out = BytesMut::new();
        write_inet(s, cidr, &mut out).map(|()| decode(&out))
    }

    #[test]
    fn inet_keeps_host_bits_and_cidr_refuses_them() {
        assert_eq!(inet("192.168.1.5", false).unwrap(), "192.168.1.5");
        assert_eq!(inet("192.168.1.5/24", false).unwrap(), "192.168.1.5/24");
        assert_eq!(inet("192.168.1.0/24", true).unwrap(), "192.168.1.0/24");
        assert_eq!(inet("10.1.2.3", true).unwrap(), "10.1.2.3/32");
        assert_eq!(inet("0.0.0.0/0", true).unwrap(), "0.0.0.0/0");
        assert_eq!(inet("2001:db8::1", false).unwrap(), "2001:db8::1");
        assert_eq!(inet("2001:DB8::/32", true).unwrap(), "2001:db8::/32");
        assert_eq!(inet("::ffff:1.2.3.4/128", false).unwrap(), "::ffff:1.2.3.4");
        let mut out = BytesMut::new();
        write_inet("10.0.0.0/8", true, &mut out).unwrap();
        assert_eq!(
            out.to_vec(),
            [2, 8, 1, 4, 10, 0, 0, 0],
            "family, bits, is_cidr, nb, address"
        );
        for (bad, cidr, why) in [
            ("1.2.3.256", false, "is not a valid inet"),
            ("1.2.3", false, "is not a valid inet"),
            ("01.2.3.4", false, "is not a valid inet"),
            ("1.2.3.4/33", false, "longer than"),
            ("::1/129", false, "longer than"),
            ("1.2.3.4/", false, "not a number"),
            ("1.2.3.4/-1", false, "not a number"),
            ("1.2.3.4/8/8", false, "not a number"),
            ("fe80::1%eth0", false, "is not a valid inet"),
            ("192.168.1.5/24", true, "bits set to the right"),
            ("2001:db8::1/64", true, "bits set to the right"),
            ("10/8", true, "is not a valid cidr"),
            ("", true, "is not a valid cidr"),
        ] {
            let err = inet(bad, cidr).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn mac_addresses_in_every_common_spelling() {
        let want = vec![0x08, 0x00, 0x2b, 0x01, 0x02, 0x03];
        for s in [
            "08:00:2b:01:02:03",
            "08-00-2B-01-02-03",
            "0800.2b01.0203",
            "08002b010203",
        ] {
            assert_eq!(parse_mac(s, 6), Ok(want.clone()), "{s}");
        }
        assert_eq!(
            parse_mac("08:00:2b:01:02:03", 8),
            Ok(vec![0x08, 0x00, 0x2b, 0xff, 0xfe, 0x01, 0x02, 0x03]),
            "EUI-48 into macaddr8 as PostgreSQL converts it"
        );
        assert_eq!(
            parse_mac("08:00:2b:01:02:03:04:05", 8),
            Ok(vec![8, 0, 0x2b, 1, 2, 3, 4, 5])
        );
        for bad in [
            "08:00:2b:01:02",
            "08:00:2b:01:02:03:04",
            "08:00:2b:01:02:0g",
            "8:0:2b:1:2:3",
            "08:00-2b:01:02:03",
            "08002b01020",
            "",
            "08:00:2b:01:02:03:04:05",
        ] {
            let err = parse_mac(bad, 6).unwrap_err();
            assert!(err.contains("is not a macaddr"), "{bad}: {err}");
        }
        assert!(parse_mac("08:00:2b:01:02:03:04", 8).is_err());
    }

    proptest! {
        /// Any IPv4 or IPv6 network with host bits cleared is a cidr that decodes to itself;
        /// with any host bit set it is refused as a cidr and kept whole as an inet.
        #[test]
        fn any_network_round_trips(v4 in any::<u32>(), v6 in any::<u128>(), bits4 in 0u8..=32, bits6 in 0u8..=128) {
            for (addr, bits, max) in [
                (IpAddr::from(Ipv4Addr::from(v4)), bits4, 32u32),
                (IpAddr::from(Ipv6Addr::from(v6)), bits6, 128),
            ] {
                let text = format!("{addr}/{bits}");
                let host = match addr {
                    IpAddr::V4(a) => u128::from(u32::from(a)) & (u128::from(u32::MAX) >> bits),
                    IpAddr::V6(a) => u128::from(a) & u128::MAX.checked_shr(u32::from(bits)).unwrap_or(0),
                };
                let shown = if u32::from(bits) == max { addr.to_string() } else { text.clone() };
                prop_assert_eq!(inet(&text, false), Ok(shown));
                if host == 0 {
                    prop_assert_eq!(inet(&text, true), Ok(text.clone()));
                } else {
                    prop_assert!(inet(&text, true).is_err());
                }
            }
        }

        #[test]
        fn any_mac_round_trips(bytes in proptest::collection::vec(any::<u8>(), 8)) {
            let six: Vec<String> = bytes[..6].iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(parse_mac(&six.join(":"), 6), Ok(bytes[..6].to_vec()));
            prop_assert_eq!(parse_mac(&six.join("-").to_uppercase(), 6), Ok(bytes[..6].to_vec()));
            let eight: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(parse_mac(&eight.concat(), 8), Ok(bytes.clone()));
        }
    }
}
