package nodefilter

import (
	"encoding/binary"
	"fmt"

	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Attributes the x/sys constants lack (include/uapi/linux/netfilter/nf_tables.h).
const (
	nftaHookDevs   = 0x4 // NFTA_HOOK_DEVS: nested NFTA_DEVICE_NAME
	nftaDeviceName = 0x1 // NFTA_DEVICE_NAME
)

// rawChain is a netdev chain as the kernel lists it, with what github.com/google/nftables
// does not read: the devices its hook is on.
type rawChain struct {
	name     string
	typ      string
	hook     *uint32
	priority *int32
	policy   *uint32
	devices  []string
}

// matches reports whether the chain is the anti-spoofing chain w: a filter chain on the
// ingress hook of w's device (only), at w's priority, with w's policy.
func (c rawChain) matches(w chainSpec) bool {
	return c.typ == string(w.typ) &&
		c.hook != nil && *c.hook == uint32(*w.hook) &&
		c.priority != nil && *c.priority == int32(*w.priority) &&
		c.policy != nil && *c.policy == uint32(*w.policy) &&
		len(c.devices) == 1 && c.devices[0] == w.device
}

// netdevChains lists the chains of the netdev table over the Filter's own nf_tables socket.
func (f *Filter) netdevChains() ([]rawChain, error) {
	req := mdnetlink.Message{
		Header: mdnetlink.Header{
			Type:  mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETCHAIN),
			Flags: mdnetlink.Request | mdnetlink.Dump,
		},
		// struct nfgenmsg: the family, the version, the resource ID.
		Data: []byte{unix.NFPROTO_NETDEV, unix.NFNETLINK_V0, 0, 0},
	}
	msgs, err := f.raw.Execute(req)
	if err != nil {
		return nil, fmt.Errorf("list netdev chains: %w", err)
	}
	var out []rawChain
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		c, table, err := parseChain(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("list netdev chains: %w", err)
		}
		if table == IngressTable {
			out = append(out, c)
		}
	}
	return out, nil
}

func parseChain(b []byte) (c rawChain, table string, err error) {
	ad, err := mdnetlink.NewAttributeDecoder(b)
	if err != nil {
		return c, "", err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CHAIN_TABLE:
			table = ad.String()
		case unix.NFTA_CHAIN_NAME:
			c.name = ad.String()
		case unix.NFTA_CHAIN_TYPE:
			c.typ = ad.String()
		case unix.NFTA_CHAIN_POLICY:
			v := ad.Uint32()
			c.policy = &v
		case unix.NFTA_CHAIN_HOOK:
			ad.Nested(func(nd *mdnetlink.AttributeDecoder) error {
				var dev string
				var devs []string
				for nd.Next() {
					switch nd.Type() {
					case unix.NFTA_HOOK_HOOKNUM:
						v := nd.Uint32()
						c.hook = &v
					case unix.NFTA_HOOK_PRIORITY:
						v := int32(nd.Uint32())
						c.priority = &v
					case unix.NFTA_HOOK_DEV:
						dev = nd.String()
					case nftaHookDevs:
						nd.Nested(func(dd *mdnetlink.AttributeDecoder) error {
							for dd.Next() {
								if dd.Type() == nftaDeviceName {
									devs = append(devs, dd.String())
								}
							}
							return nil
						})
					}
				}
				// A kernel lists a chain on one device with NFTA_HOOK_DEV, and may list it
				// under NFTA_HOOK_DEVS as well.
				c.devices = devs
				if len(devs) == 0 && dev != "" {
					c.devices = []string{dev}
				}
				return nil
			})
		}
	}
	return c, table, ad.Err()
}
