package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/cproxy/cproxy/client"
)

// A harness mints a token when a sandbox starts, hands it to the sandbox's
// commands, and revokes it when the sandbox stops or sleeps.
func Example() {
	adminURL, stop := startCproxy() // cproxy serve's admin listener, e.g. http://127.0.0.1:9001
	defer stop()
	ctx := context.Background()

	c, err := client.New(adminURL)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := c.CreateToken(ctx, "conv-42", client.CreateOptions{Profile: "web", TTL: 2 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	// The token prints as REDACTED; Reveal gives it, for the sandbox's
	// environment (ANTHROPIC_AUTH_TOKEN, CPROXY_TOKEN).
	fmt.Println("minted", tok.Sandbox, tok.Profile, tok.Secret)
	fmt.Println("for the sandbox:", strings.HasPrefix(tok.Reveal(), "cpx_"))

	if err := c.Revoke(ctx, "conv-42"); err != nil {
		log.Fatal(err)
	}
	infos, err := c.List(ctx, "conv-42")
	if err != nil {
		log.Fatal(err)
	}
	for _, info := range infos {
		fmt.Println(info.ID == tok.ID, info.State)
	}

	// A refusal carries the admin API's status and message.
	_, err = c.CreateToken(ctx, "conv-42", client.CreateOptions{Profile: "nope"})
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, apiErr.Message)
	}
	// Output:
	// minted conv-42 web REDACTED
	// for the sandbox: true
	// true revoked
	// 400 cproxy: profile "nope" is not defined in the policy
}
