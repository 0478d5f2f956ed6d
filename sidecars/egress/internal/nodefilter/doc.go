// Package nodefilter is the packet filter of the node agent: it enforces each sandbox pod's
// outbound policy from the node's root network namespace, where nothing inside a pod can
// touch it, compiled from the same first-match rules (egressapi.Matcher) that the node's DNS
// proxy follows, so that what the proxy lets a name resolve to is what the filter lets the
// pod connect to. It replaces package firewall, which filtered inside each pod's namespace.
//
// Inside the pod is the wrong place for a gVisor sandbox: gVisor's network stack runs in
// user space and writes the pod's frames to its interface through a packet socket, so the
// pod namespace's netfilter hooks never see them. The node's do, on the host side of the
// pod's interface, whichever way it is wired: a routed veth (the ptp plugin: no master, /32
// routes) or a port of a Linux bridge (the bridge plugin), whose frames br_netfilter passes
// through the inet hooks.
//
// It talks to the kernel over netlink only (github.com/google/nftables for nf_tables, a raw
// nf_tables socket for what that library does not parse, github.com/vishvananda/netlink for
// links and conntrack): the agent's image carries no nft, iptables or conntrack binary.
//
// # Ruleset
//
// Two tables. <id> is PodID(UID), 12 hex digits; the meta rules are rules without
// expressions whose comment records the pod, for Pods.
//
//	table netdev kube_sandbox_ingress {
//	    chain p_<id> {
//	        type filter hook ingress device "<iface>" priority -500; policy drop;
//	        comment "pod uid=<uid> iface=<iface> ips=<ip>,<ip>"                   # meta
//	        ether type arp arp saddr ip != <each IPv4> counter drop                   # spoofed
//	        ether type ip ip saddr != <each IPv4> counter drop                        # spoofed
//	        ether type ip6 icmpv6 type nd-neighbor-advert
//	            nd target != <each IPv6> nd target != fe80::/10 counter drop          # spoofed
//	        ether type ip6 icmpv6 type { nd-router-advert, nd-redirect } counter drop # spoofed
//	        ether type ip6 ip6 saddr <IPv6> accept                                    # each
//	        ether type ip6 ip6 saddr fe80::/10 icmpv6 type 130-136 accept             # ND, MLD
//	        ether type ip6 ip6 saddr fe80::/10 icmpv6 type 143 accept                 # MLDv2
//	        ether type ip6 ip6 saddr :: icmpv6 type 130-136 accept
//	        ether type ip6 ip6 saddr :: icmpv6 type 143 accept
//	        ether type ip accept
//	        ether type arp accept
//	        counter drop                                                              # spoofed
//	    }
//	}
//	table inet kube_sandbox_egress {
//	    map pods4 { type ipv4_addr : verdict }      # each pod's IPv4: jump p_<id>
//	    map pods6 { type ipv6_addr : verdict }
//	    set dns4 { type ipv4_addr }                 # each pod's IPv4
//	    set dns6 { type ipv6_addr }
//	    chain prerouting {
//	        type filter hook prerouting priority -150; policy accept;
//	        meta nfproto ipv4 ip saddr vmap @pods4
//	        meta nfproto ipv6 ip6 saddr vmap @pods6
//	    }
//	    chain nat_prerouting {
//	        type nat hook prerouting priority -105; policy accept;
//	        meta nfproto ipv4 ip saddr @dns4 meta l4proto udp th dport 53 redirect to :DNSPORT
//	        meta nfproto ipv4 ip saddr @dns4 meta l4proto tcp th dport 53 redirect to :DNSPORT
//	        # and the same for ipv6, with @dns6
//	    }
//
//	    # per pod:
//	    set p_<id>_<hash>_4 { type ipv4_addr; flags timeout; comment "<key>" }   # per name key
//	    set p_<id>_<hash>_6 { type ipv6_addr; flags timeout; comment "<key>" }
//	    chain p_<id>_deny {
//	        counter
//	        meta l4proto tcp reject with tcp reset
//	        reject with icmpx admin-prohibited
//	    }
//	    chain p_<id> {
//	        comment "pod uid=<uid> iface=<iface> ips=<ip>,<ip>"                   # meta
//	        ct state established,related accept
//	        ip daddr PROBEADDR tcp dport PROBEPORT counter reject with tcp reset      # the probe
//	        ip daddr <each node address> tcp dport WAITPORT accept
//	        meta l4proto udp th dport 53 accept
//	        meta l4proto tcp th dport 53 accept
//	        meta nfproto ipv6 meta l4proto ipv6-icmp ip6 hoplimit 255 icmpv6 type nd-router-solicit accept
//	        meta nfproto ipv6 meta l4proto ipv6-icmp ip6 hoplimit 255 icmpv6 type nd-neighbor-solicit accept
//	        meta nfproto ipv6 meta l4proto ipv6-icmp ip6 hoplimit 255 icmpv6 type nd-neighbor-advert accept
//	        # then, for each matcher rule in order, per family it can match and per port entry:
//	        ip daddr 10.0.0.0/8 meta l4proto tcp th dport 443 counter accept           # Allow, prefix
//	        ip daddr @p_<id>_<hash>_4 meta l4proto tcp th dport 8000-8080 jump p_<id>_deny  # Deny, name
//	        # and the default:
//	        counter accept   |   jump p_<id>_deny
//	    }
//	}
//
// Why each part is there:
//
//   - The policy chains key on the packet's source address (the verdict maps: one lookup per
//     packet, whatever the number of pods, and each pod's chain sees its packets only). That
//     is only as good as the source address, hence the netdev chain: on the ingress hook of
//     the pod's host-side interface, it sees every frame the pod sends before the bridge
//     (its rx handler comes after) or routing do, and lets through only the pod's own
//     addresses. A pod cannot pass for another (and get its policy), nor for an address no
//     policy applies to. The ARP sender and the neighbour advertisement's target are held to
//     the same, or a pod could take another's traffic by poisoning the bridge's neighbours'
//     caches; router advertisements and redirects from a pod are dropped for the same reason.
//   - The netdev chain's policy is drop, with explicit accepts: it fails closed. What it does
//     not recognize goes, which matters for VLAN-tagged frames (the ethertype is matched in
//     the link-layer header, which shows the tag even when the kernel has moved it to the
//     packet's metadata): br_netfilter leaves tagged frames alone (bridge-nf-filter-vlan-tagged
//     is 0 by default), so they would go from pod to pod on the bridge past the policy. Its
//     drops are counted as Spoofed.
//   - Link-local and unspecified IPv6 sources map to no pod, so they would pass the inet
//     hooks unfiltered, to other pods on the same bridge; from them, only neighbour discovery
//     and multicast listener messages go, which is what they are for.
//   - The prerouting chain sits after conntrack (-200), so that "ct state" works, and before
//     dstnat (-100), so that it sees the destination the pod sent to, not the one kube-proxy's
//     DNAT made of it. It sees routed traffic, bridged traffic (br_netfilter runs the inet
//     prerouting hook for bridged IPv4 and IPv6 frames, conntrack included) and traffic to the
//     node itself alike. Only prerouting is filtered: connections into the pod (kubelet probes,
//     the apiserver's to execd) must keep working, and their replies pass by "ct state
//     established,related".
//   - Established flows pass without being looked at again, which is why a policy change comes
//     with CutFlows: it deletes the node's conntrack entries of the pod's outbound flows that
//     the new policy denies.
//   - The probe: a TCP SYN from the pod to ProbeAddr:ProbePort (an address of the node where
//     something listens) gets a reset from the filter, and a connection without one. The
//     pod's first init container uses it to prove that its filter is in before the sandbox
//     starts. It is counted apart (Probes), and rejected in place rather than by the deny
//     chain, so that proofs are not counted as denials.
//   - The wait endpoint (WaitPort on the node's addresses) comes before the matcher's rules:
//     no policy can keep a pod from asking the agent whether its filter is in.
//   - Port 53 is special: every query a pod sends, to any resolver, is redirected (nat) to the
//     node's DNS proxy. The nat chain runs at -105, before dstnat: of two nat chains on a
//     hook, the first to bind the flow wins, chains of equal priority run last-registered
//     first, and kube-proxy's DNAT is at dstnat: at -100, a query to the cluster DNS
//     service's address would go on to CoreDNS whenever kube-proxy had (re)made its table
//     after the agent. The redirect goes to the primary address of the interface the query
//     came in on: the bridge's for a bridged pod, the host-side veth's for a routed one (which
//     needs one, as ptp gives it). So the proxy listens on the wildcard address; the pod gets
//     its answer from the address it asked (conntrack undoes the redirect). The filter lets
//     port 53 by, before the matcher's rules, so that no policy can deny a pod its DNS.
//   - IPv6 neighbour discovery is not tracked by conntrack (its packets are "ct state
//     invalid"), so without explicit rules a default-deny policy would drop the pod's
//     neighbour solicitations and advertisements from its global address and IPv6 would stop
//     working altogether. Only router solicitations, neighbour solicitations and
//     advertisements are let by, with hop limit 255 (RFC 4861: receivers drop anything else).
//   - A name target ("pypi.org", "*.pythonhosted.org") matches the addresses the DNS proxy
//     resolved for it for that pod and taught the filter (Learn), in a pair of sets per pod and
//     target key with per-element timeouts taken from the DNS TTL, so that an address the name
//     no longer resolves to ages out by itself. Per pod: what one pod resolved must not open
//     another's filter. Rules with the same key share the sets.
//   - Denied connections are rejected, not dropped, so that the sandbox's code fails fast with
//     an error it can report instead of hanging until a timeout: a TCP connect gets a reset
//     (ECONNREFUSED); UDP and the rest get ICMP administratively prohibited, which a connected
//     socket reports as EHOSTUNREACH (IPv4) or EACCES (IPv6). Rejecting works in prerouting,
//     for bridged packets too: the kernel routes the reset or the ICMP error back to the pod
//     (through the bridge's address, for a bridged pod).
//   - Accepting rules and the deny chain carry counters: the allowed and denied new
//     connections that the agent exports (Counters).
//
// The tables are not owned by the process (no NFT_TABLE_F_OWNER): if the agent dies, the
// rules stay and the pods stay fenced in, and a restarted agent picks them up again: Pods
// reads back the pods the kernel holds from the meta rules (the interface from the netdev
// chain's hook), Sync changes nothing if a pod's policy is the same, and reads back the
// learned addresses from its sets.
//
// # Reconciling
//
// Sync works like kindnetd's, one pod at a time: it lists what the tables hold (every chain's
// and set's name, the shared chains' rules and elements, and the pod's own rules), compares
// it with what the pod and its matcher want, and if anything differs (a rule deleted, one
// added by someone else, a set missing, a chain's policy or device changed) it rewrites what
// differs in a single netlink batch, which the kernel applies atomically: no packet ever sees
// the pod without its filter, or half of a policy. Rules are compared by a fingerprint stored
// in their user data (shown by nft as their comment), a hash of the chain, the rule's
// description and its exact netlink expressions.
//
// A Sync touches no other pod's chains or sets. It repairs what all pods share; if a shared
// map or set has to be made anew, it puts every pod's addresses back in, from their meta
// rules. An address of the pod that the map sends to another pod's chain was that pod's (the
// address was given anew, and the other pod's deletion is yet to come): Sync takes it over,
// and Remove of the other pod leaves it. Another pod's netdev chain on the pod's interface is
// of a pod that is gone (pods do not share interfaces) and would drop the new one's traffic:
// Sync deletes it.
//
// Sync refuses a pod whose interface is missing (since Linux 6.16, a netdev chain may name a
// device that does not exist, and attaches when one of that name appears: a wrong name would
// filter nothing, silently), or is a port of anything but a Linux bridge (an Open vSwitch
// bridge switches frames past the inet hooks), or of a bridge while bridged packets skip
// them: net.bridge.bridge-nf-call-iptables (ip6tables, for IPv6) must be 1 in the Filter's
// namespace. Those switches are per network namespace (and each new one starts at 1), so it is
// the node namespace's that counts.
package nodefilter
