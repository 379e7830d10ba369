// Command ferry-pki creates the certificates of ferry's local control planes and waits for
// an API server to be ready. It is built with kube-apiserver and etcd, so the harness needs
// nothing beyond Go.
//
//	ferry-pki certs DIR          CA, serving and admin client certificates, service-account keys
//	ferry-pki wait URL DIR SECS  polls URL/readyz with the admin certificate until it answers ok
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: ferry-pki certs DIR | ferry-pki wait URL DIR SECONDS")
	}
	switch os.Args[1] {
	case "certs":
		certs(os.Args[2])
	case "wait":
		if len(os.Args) != 5 {
			fail("usage: ferry-pki wait URL DIR SECONDS")
		}
		secs, err := strconv.Atoi(os.Args[4])
		check(err)
		wait(os.Args[2], os.Args[3], time.Duration(secs)*time.Second)
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "ferry-pki: "+msg)
	os.Exit(1)
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func write(dir, name string, block *pem.Block) {
	check(os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600))
}

func key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	return k
}

func writeKey(dir, name string, k *ecdsa.PrivateKey) {
	der, err := x509.MarshalECPrivateKey(k)
	check(err)
	write(dir, name, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	check(err)
	return n
}

// certs writes ca.crt, serving.crt/.key (127.0.0.1, localhost), admin.crt/.key
// (system:masters) and sa.key/sa.pub into dir. Existing files are kept.
func certs(dir string) {
	check(os.MkdirAll(dir, 0o700))
	if _, err := os.Stat(filepath.Join(dir, "admin.key")); err == nil {
		return
	}
	now := time.Now().Add(-time.Hour)
	caKey := key()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ferry-local-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	check(err)
	ca, err := x509.ParseCertificate(caDER)
	check(err)
	write(dir, "ca.crt", &pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	issue := func(name string, tmpl *x509.Certificate) {
		k := key()
		tmpl.SerialNumber = serial()
		tmpl.NotBefore = now
		tmpl.NotAfter = now.Add(10 * 365 * 24 * time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		check(err)
		write(dir, name+".crt", &pem.Block{Type: "CERTIFICATE", Bytes: der})
		writeKey(dir, name+".key", k)
	}
	issue("serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default.svc"},
	})
	issue("admin", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "ferry-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	check(err)
	write(dir, "sa.key", &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)})
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	check(err)
	write(dir, "sa.pub", &pem.Block{Type: "PUBLIC KEY", Bytes: pub})
}

// wait polls url/readyz with the admin certificate of dir until it answers 200.
func wait(url, dir string, timeout time.Duration) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	check(err)
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	check(err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		resp, err := client.Get(url + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	fail(fmt.Sprintf("%s not ready after %s: %s", url, timeout, last))
}
