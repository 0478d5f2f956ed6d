// Package firewall is the packet filter of sandbox-egress: a stateful, default-deny nf_tables
// ruleset in the pod's network namespace, compiled from the same first-match rules
// (egressapi.Matcher) that the DNS proxy follows, so that what the proxy lets a name resolve
// to is what the filter lets the sandbox connect to.
//
// It talks to the kernel over netlink only (github.com/google/nftables for nf_tables,
// github.com/vishvananda/netlink for addresses and conntrack): the sidecar image carries no
// nft, iptables or conntrack binary.
//
// # Ruleset
//
// One table of the inet family, so that IPv4 and IPv6 share every rule:
//
//	table inet kube_sandbox_egress {
//	    set n<hash>_4 { type ipv4_addr; flags timeout; comment "<key>" }   # per name target key
//	    set n<hash>_6 { type ipv6_addr; flags timeout; comment "<key>" }
//
//	    chain deny {
//	        counter
//	        meta l4proto tcp reject with tcp reset
//	        reject with icmpx admin-prohibited
//	    }
//	    chain output {
//	        type filter hook output priority filter; policy drop;
//	        oifname "lo" accept
//	        meta nfproto ipv4 ip daddr 127.0.0.0/8 accept
//	        meta nfproto ipv6 ip6 daddr ::1 accept
//	        ct state established,related accept
//	        meta mark MARK meta l4proto tcp th dport 53 accept
//	        meta mark MARK meta l4proto udp th dport 53 accept
//	        meta nfproto ipv6 meta l4proto ipv6-icmp ip6 hoplimit 255 icmpv6 type nd-router-solicit accept
//	        meta nfproto ipv6 meta l4proto ipv6-icmp ip6 hoplimit 255 icmpv6 type nd-neighbor-solicit accept
//	        meta nfproto ipv6 meta l4proto ipv6-icmp ip6 hoplimit 255 icmpv6 type nd-neighbor-advert accept
//	        # then, for each matcher rule in order, per family it can match and per port entry:
//	        ip daddr 10.0.0.0/8 meta l4proto tcp th dport 443 counter accept      # Allow, prefix
//	        ip daddr @n<hash>_4 meta l4proto tcp th dport 8000-8080 jump deny    # Deny, name
//	        ip6 daddr @n<hash>_6 counter accept                                  # no ports: any protocol
//	        # and the default:
//	        counter accept   |   jump deny
//	    }
//	    chain nat_output {
//	        type nat hook output priority dstnat;
//	        meta mark MARK return
//	        meta l4proto udp th dport 53 redirect to :DNSPORT
//	        meta l4proto tcp th dport 53 redirect to :DNSPORT
//	    }
//	}
//
// Why each part is there:
//
//   - Only the output hook is filtered: the policy is about what the sandbox reaches, and
//     connections into the pod (kubelet probes, the apiserver's to execd) must keep working;
//     their replies pass by "ct state established,related".
//   - "oifname lo" lets the pod talk to itself (execd's proxy to local ports, the DNS proxy).
//     It does not cover a query the nat chain redirected to the proxy: the output hook's
//     interface is the one routed before nat ran (eth0), so the loopback destinations are
//     accepted by address too. Nothing with such a destination leaves the pod.
//   - Established flows pass without being looked at again, which is why a policy change comes
//     with CutFlows: it deletes the conntrack entries of outbound flows the new policy denies.
//   - Port 53 is special: every query the sandbox sends, to any resolver, is redirected (nat)
//     to the DNS proxy on its loopback DNSPort; only the proxy's own upstream queries, whose
//     sockets carry SocketMark (SO_MARK needs CAP_NET_ADMIN, which the sandbox lacks), leave the
//     pod on port 53. The marked rules come before the matcher's so that no policy can deny the
//     proxy its resolvers, and the mark also exempts them from the redirect.
//   - IPv6 neighbour discovery is not tracked by conntrack (its packets are "ct state invalid"),
//     so without explicit rules a default-deny filter would drop the pod's neighbour
//     solicitations and advertisements and IPv6 would stop working altogether, replies to
//     inbound connections included. Only router solicitations, neighbour solicitations and
//     advertisements are let out, with hop limit 255 (RFC 4861: receivers drop anything else);
//     crafting them takes CAP_NET_RAW, which the sandbox does not have.
//   - A name target ("pypi.org", "*.pythonhosted.org") matches the addresses the DNS proxy
//     resolved for it and taught the filter (Learn), in a pair of named sets per target key with
//     per-element timeouts taken from the DNS TTL, so that an address the name no longer
//     resolves to ages out by itself. Rules with the same key share the sets.
//   - Denied connections are rejected, not dropped, so that the sandbox's code fails fast with
//     an error it can report instead of hanging until a timeout: a TCP connect gets a reset
//     (ECONNREFUSED); a UDP or ICMP send fails at once with EPERM (the packet is dropped on
//     the sender's own output path), and the ICMP administratively-prohibited error that
//     goes with it reaches a connected socket as EHOSTUNREACH (IPv4) or EACCES (IPv6).
//   - Accepting rules and the deny chain carry counters: the allowed and denied new
//     connections that sandbox-egress exports (Counters).
//
// The table is not owned by the process (no NFT_TABLE_F_OWNER): if sandbox-egress dies, its
// filter stays and the sandbox stays fenced in, and a restarted sandbox-egress picks it up
// again (Sync changes nothing if the policy is the same, and the learned addresses are read
// back from the sets).
//
// # Reconciling
//
// Sync works like kindnetd's: it lists what the table holds, compares it with what the matcher
// wants, and if anything differs (a rule deleted, one added by someone else, a set missing, a
// chain's policy changed) it rewrites what differs in a single netlink batch, which the kernel
// applies atomically: no packet ever sees the pod without its filter, or half of a policy.
// Rules are compared by a fingerprint stored in their user data (shown by nft as their
// comment), a hash of the chain, the rule's description and its exact netlink expressions.
package firewall
