// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title idlegrid payment channels
/// @notice Unidirectional ERC-20 payment channels, one live channel per
/// (renter, provider, token). The renter funds a channel once and pays by
/// signing vouchers off chain: each names the channel, the cumulative
/// amount owed so far and a nonce, under EIP-712 with this contract's
/// chain ID and address. The provider redeems the latest voucher when it
/// chooses; the renter may close a channel the provider has left alone,
/// after a challenge period in which the provider may still redeem.
contract PaymentChannels is EIP712 {
    using SafeERC20 for IERC20;

    struct Channel {
        address renter;
        address provider;
        address token;
        // Tokens the renter put in, in all.
        uint256 deposit;
        // Tokens redeemed to the provider so far (the last voucher's amount).
        uint256 paid;
        // The nonce of the last voucher redeemed.
        uint64 nonce;
        // When the renter started a close: the end of the challenge period.
        uint64 closesAt;
        // Settled: the rest went back to the renter; nothing more happens.
        bool finished;
    }

    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channel,uint256 amount,uint64 nonce)");

    /// @notice Seconds a renter-started close waits for the provider.
    uint64 public immutable challengePeriod;

    mapping(bytes32 => Channel) public channels;
    /// @notice Channels finished per (renter, provider, token) pair: a new
    /// channel of the pair gets a new ID, so no voucher of an old one pays
    /// from it.
    mapping(bytes32 => uint64) public generation;
    /// @notice The live channel of a (renter, provider, token), or zero.
    mapping(bytes32 => bytes32) public live;

    event Opened(bytes32 indexed id, address indexed renter, address indexed provider, address token, uint256 deposit);
    event ToppedUp(bytes32 indexed id, uint256 amount, uint256 deposit);
    event Redeemed(bytes32 indexed id, uint256 amount, uint64 nonce, uint256 paidNow);
    event CloseStarted(bytes32 indexed id, uint64 closesAt);
    event Finished(bytes32 indexed id, uint256 paid, uint256 refunded);

    error ChannelExists(bytes32 id);
    error UnknownChannel(bytes32 id);
    error NotRenter();
    error NotProvider();
    error Finished_();
    error Closing(uint64 closesAt);
    error ChallengeOpen(uint64 closesAt);
    error StaleVoucher(uint64 nonce, uint64 last);
    error DecreasingAmount(uint256 amount, uint256 paid);
    error OverDeposit(uint256 amount, uint256 deposit);
    error BadSignature();
    error ZeroAmount();
    error BadParty();

    constructor(uint64 challengeSeconds) EIP712("idlegrid channels", "1") {
        challengePeriod = challengeSeconds;
    }

    /// @notice The ID the next channel of (renter, provider, token) gets.
    function channelId(address renter, address provider, address token) public view returns (bytes32) {
        bytes32 pair = keccak256(abi.encode(renter, provider, token));
        return keccak256(abi.encode(block.chainid, address(this), pair, generation[pair]));
    }

    /// @notice Opens the caller's channel to provider in token, funded with
    /// amount (approved to this contract beforehand).
    function open(address provider, address token, uint256 amount) external returns (bytes32 id) {
        if (amount == 0) revert ZeroAmount();
        if (provider == address(0) || provider == msg.sender || token == address(0)) revert BadParty();
        bytes32 pair = keccak256(abi.encode(msg.sender, provider, token));
        if (live[pair] != bytes32(0)) revert ChannelExists(live[pair]);
        id = channelId(msg.sender, provider, token);
        live[pair] = id;
        channels[id] = Channel(msg.sender, provider, token, amount, 0, 0, 0, false);
        IERC20(token).safeTransferFrom(msg.sender, address(this), amount);
        emit Opened(id, msg.sender, provider, token, amount);
    }

    /// @notice Adds amount to the caller's open channel. A channel that is
    /// closing or finished takes nothing more.
    function topUp(bytes32 id, uint256 amount) external {
        Channel storage c = _open(id);
        if (msg.sender != c.renter) revert NotRenter();
        if (amount == 0) revert ZeroAmount();
        c.deposit += amount;
        IERC20(c.token).safeTransferFrom(msg.sender, address(this), amount);
        emit ToppedUp(id, amount, c.deposit);
    }

    /// @notice Pays the provider what the voucher adds to what it was paid,
    /// and keeps the channel open. Also the provider's answer to a close
    /// the renter started, until its challenge period ends.
    function redeem(bytes32 id, uint256 amount, uint64 nonce, bytes calldata signature) external {
        Channel storage c = _live(id);
        if (msg.sender != c.provider) revert NotProvider();
        if (c.closesAt != 0 && block.timestamp >= c.closesAt) revert Closing(c.closesAt);
        _redeem(id, c, amount, nonce, signature);
    }

    /// @notice The provider closes the channel: redeems the voucher (none
    /// when signature is empty) and returns the rest to the renter.
    function close(bytes32 id, uint256 amount, uint64 nonce, bytes calldata signature) external {
        Channel storage c = _live(id);
        if (msg.sender != c.provider) revert NotProvider();
        if (signature.length != 0) {
            if (c.closesAt != 0 && block.timestamp >= c.closesAt) revert Closing(c.closesAt);
            _redeem(id, c, amount, nonce, signature);
        }
        _finish(id, c);
    }

    /// @notice The renter starts to close: after the challenge period, in
    /// which the provider may redeem a newer voucher, it withdraws the rest.
    function startClose(bytes32 id) external {
        Channel storage c = _open(id);
        if (msg.sender != c.renter) revert NotRenter();
        c.closesAt = uint64(block.timestamp) + challengePeriod;
        emit CloseStarted(id, c.closesAt);
    }

    /// @notice The renter takes back what was not redeemed, once the
    /// challenge period of its close has passed.
    function withdraw(bytes32 id) external {
        Channel storage c = _live(id);
        if (msg.sender != c.renter) revert NotRenter();
        if (c.closesAt == 0 || block.timestamp < c.closesAt) revert ChallengeOpen(c.closesAt);
        _finish(id, c);
    }

    /// @notice The EIP-712 digest a renter signs for a voucher.
    function voucherDigest(bytes32 id, uint256 amount, uint64 nonce) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(VOUCHER_TYPEHASH, id, amount, nonce)));
    }

    function _redeem(bytes32 id, Channel storage c, uint256 amount, uint64 nonce, bytes calldata signature) private {
        (address signer, ECDSA.RecoverError e,) = ECDSA.tryRecover(voucherDigest(id, amount, nonce), signature);
        if (e != ECDSA.RecoverError.NoError || signer != c.renter) revert BadSignature();
        if (nonce <= c.nonce) revert StaleVoucher(nonce, c.nonce);
        if (amount < c.paid) revert DecreasingAmount(amount, c.paid);
        if (amount > c.deposit) revert OverDeposit(amount, c.deposit);
        uint256 now_ = amount - c.paid;
        c.paid = amount;
        c.nonce = nonce;
        if (now_ != 0) IERC20(c.token).safeTransfer(c.provider, now_);
        emit Redeemed(id, amount, nonce, now_);
    }

    function _finish(bytes32 id, Channel storage c) private {
        c.finished = true;
        bytes32 pair = keccak256(abi.encode(c.renter, c.provider, c.token));
        delete live[pair];
        generation[pair] += 1;
        uint256 rest = c.deposit - c.paid;
        if (rest != 0) IERC20(c.token).safeTransfer(c.renter, rest);
        emit Finished(id, c.paid, rest);
    }

    function _live(bytes32 id) private view returns (Channel storage c) {
        c = channels[id];
        if (c.renter == address(0)) revert UnknownChannel(id);
        if (c.finished) revert Finished_();
    }

    function _open(bytes32 id) private view returns (Channel storage c) {
        c = _live(id);
        if (c.closesAt != 0) revert Closing(c.closesAt);
    }
}
