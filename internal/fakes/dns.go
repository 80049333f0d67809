package fakes

import (
	"encoding/binary"
	"net"
)

// DNS is a DNS server on loopback (UDP) that answers every A question with
// one address, so a test can make a public name resolve without the
// network.
type DNS struct {
	Addr string // 127.0.0.1:port
	conn net.PacketConn
}

// NewDNS starts a server answering every A question with ip (IPv4).
func NewDNS(ip net.IP) (*DNS, error) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &DNS{Addr: conn.LocalAddr().String(), conn: conn}
	go d.serve(ip.To4())
	return d, nil
}

// Close stops the server.
func (d *DNS) Close() { d.conn.Close() }

func (d *DNS) serve(ip net.IP) {
	buf := make([]byte, 512)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := dnsAnswer(buf[:n], ip); resp != nil {
			d.conn.WriteTo(resp, from)
		}
	}
}

// dnsAnswer builds the reply to a one-question query (RFC 1035 4.1): the
// question echoed, then for type A an answer pointing at it, and for any
// other type no answer (NOERROR, as for a name with no such record).
func dnsAnswer(q []byte, ip net.IP) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	end := 12
	for end < len(q) && q[end] != 0 {
		end += int(q[end]) + 1
	}
	end += 5 // the root label, type, class
	if end > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end-4 : end-2])
	resp := append([]byte(nil), q[:end]...)
	resp[2] = 0x81                             // response, recursion desired
	resp[3] = 0x80                             // recursion available, NOERROR
	binary.BigEndian.PutUint16(resp[8:10], 0)  // no authority
	binary.BigEndian.PutUint16(resp[10:12], 0) // no additional
	if qtype != 1 {
		binary.BigEndian.PutUint16(resp[6:8], 0)
		return resp
	}
	binary.BigEndian.PutUint16(resp[6:8], 1)
	resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
	return append(resp, ip...)
}
